"""Sentence and pair features: BERT's pair truncation and the [CLS] a [SEP] b [SEP] layout."""

from zhlm.finetune.kinds import windows
from zhlm.finetune.kinds.classification import classification_features
from zhlm.finetune.readers import tables

# ------------------------------------------------------------------ classification features


def test_truncate_pair_drops_from_the_longer_text_first():
    assert windows.truncate_pair(10, 3, 8) == (5, 3)
    assert windows.truncate_pair(3, 10, 8) == (3, 5)
    assert windows.truncate_pair(6, 6, 8) == (4, 4)
    assert windows.truncate_pair(2, 3, 8) == (2, 3)


def test_pair_features_layout(tokenizer):
    long = tables.PairExample("g0", "今天天气很好", "明天下雨", "1", 1)
    short = tables.PairExample("g1", "好", "坏", "0", 2)
    f = classification_features([long, short], tokenizer, ("0", "1"), 10)
    tokens = [[tokenizer.id_to_token(i) for i in row] for row in f["input_ids"]]
    # 6 + 4 characters into 10 - 3 = 7 slots: the longer text loses its tail first, then b.
    assert tokens[0] == ["[CLS]", "今", "天", "天", "气", "[SEP]", "明", "天", "下", "[SEP]"]
    assert tokens[1] == ["[CLS]", "好", "[SEP]", "坏", "[SEP]"] + ["[PAD]"] * 5
    assert f["token_type_ids"].tolist() == [[0] * 6 + [1] * 4, [0] * 3 + [1] * 2 + [0] * 5]
    assert f["attention_mask"].tolist() == [[1] * 10, [1] * 5 + [0] * 5]
    assert f["label"].tolist() == [1, 0]
