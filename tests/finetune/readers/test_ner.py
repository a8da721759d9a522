"""``zhlm.finetune.readers.ner`` on the layouts people bring: Weibo NER's characters with their
word-position digit (``科0``) read with the digits dropped and counted; a training tag outside
the labels names the flag that takes the file's own types."""

import pytest

from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune.kinds.ner import features as ner_features
from zhlm.finetune.readers import ner as ner_reader

WEIBO = "科0\tB-ORG.NAM\n技1\tI-ORG.NAM\n好0\tO\n\n我0\tO\n们1\tO\n"


@pytest.mark.parametrize("read", [ner_reader.read_tagged, ner_reader.iter_tagged])
def test_the_weibo_layout_reads_with_its_digits_dropped_and_counted(tmp_path, read):
    path = tmp_path / "weibo.train"
    path.write_text(WEIBO, encoding="utf-8")
    examples, report = read(str(path))
    examples = list(examples)
    assert [(e.text, e.tags) for e in examples] == [
        ("科技好", ("B-ORG.NAM", "I-ORG.NAM", "O")),
        ("我们", ("O", "O")),
    ]
    assert report.counts == {ner_reader.WORD_POSITION: 2} and report.dropped == 0
    assert "word-position digit (Weibo NER's 字0): 3, dropped" in report.issues[0].message


def test_a_training_tag_outside_the_labels_names_the_flag(tmp_path):
    path = tmp_path / "weibo.train"
    path.write_text(WEIBO, encoding="utf-8")
    examples, _ = ner_reader.read_tagged(str(path))
    with pytest.raises(ValueError, match=r"--config.task.labels='\(\)' to take the training"):
        ner_features.ner_features(examples, WordPiece(default_vocab()), ("O",), 16, 8)
