"""``zhlm.Predictor``: a str, a list of texts, pairs and dicts give, for each kind, what
zhlm-predict writes for a file of the same inputs (a plain ``.txt`` read without ``--format``,
a SQuAD file for MRC), with the input in every result; inputs that do not fit the kind fail
with what it predicts.

The models are random tiny ones (``workdirs`` in conftest): what is under test is that memory
and files go through the same code, not accuracy.
"""

import json

import numpy as np
import pytest
from helpers import LONG_REVIEWS, cut_to_tokens

import zhlm
from zhlm.finetune.predict import predict

REVIEWS = ["这家酒店很干净，服务也好。", "房间太小了，不推荐。", "一般般吧"]
PAIRS = [("今天几号", "今天是几号"), ("北京天气怎么样", "上海几点了")]
SENTENCES = ["张三在北京大学读书。", "李四去了上海。"]


def _written(workdir, lines, tmp_path, name, fmt="", **settings):
    """zhlm-predict's records for a file of ``lines`` named ``name``."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / f"{name}.jsonl"
    n = predict(workdir, str(path), str(out), fmt, **settings)
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(records) == n
    return records


def _same_classes(results, records):
    assert [r["label"] for r in results] == [r["label"] for r in records]
    for ours, theirs in zip(results, records, strict=True):
        assert ours["probabilities"] == pytest.approx(theirs["probabilities"], rel=1e-5)


def test_texts_in_memory_are_classified_as_a_plain_text_file_is(workdirs, tmp_path):
    written = _written(workdirs["classification"], REVIEWS, tmp_path, "reviews.txt")
    assert [r["id"] for r in written] == ["reviews.txt:1", "reviews.txt:2", "reviews.txt:3"]
    assert [r["text"] for r in written] == REVIEWS
    predictor = zhlm.pipeline(workdirs["classification"])
    assert isinstance(predictor, zhlm.Predictor) and predictor.inputs == ("text",)
    results = predictor(REVIEWS)
    _same_classes(results, written)
    one = predictor(REVIEWS[1])
    assert set(one) == {"text", "label", "probabilities"} and one["text"] == REVIEWS[1]
    assert list(one["probabilities"]) == list(predictor.task.labels)
    assert sum(one["probabilities"].values()) == pytest.approx(1.0)
    _same_classes([one], written[1:2])
    records = predictor.predict(
        [{"text": t, "id": f"r{i}", "label": "?"} for i, t in enumerate(REVIEWS)]
    )
    assert [r["id"] for r in records] == ["r0", "r1", "r2"]
    _same_classes(records, written)


def test_pairs_in_memory_are_classified_as_tab_separated_lines_are(workdirs, tmp_path):
    lines = [f"{a}\t{b}" for a, b in PAIRS]
    written = _written(workdirs["pair"], lines, tmp_path, "pairs.txt")
    assert len(written) == len(PAIRS)
    assert [(r["text_a"], r["text_b"]) for r in written] == PAIRS
    predictor = zhlm.pipeline(workdirs["pair"])
    assert predictor.inputs == ("text_a", "text_b")
    _same_classes(predictor(PAIRS), written)
    _same_classes(predictor([dict(text_a=a, text_b=b) for a, b in PAIRS]), written)
    _same_classes([predictor(PAIRS[1])], written[1:])
    with pytest.raises(ValueError, match=r"input 0 is a str; kind pair predicts a tuple \(text_a"):
        predictor(["今天几号"])


def test_sentences_in_memory_get_the_entities_of_a_plain_text_file(workdirs, tmp_path):
    # A .txt stays format tagged for a model trained on tagged files: --format=text.
    written = _written(workdirs["ner"], SENTENCES, tmp_path, "sentences.txt", fmt="text")
    assert [r["text"] for r in written] == SENTENCES
    predictor = zhlm.pipeline(workdirs["ner"])
    results = predictor(SENTENCES)
    assert results == [{k: v for k, v in r.items() if k != "id"} for r in written]
    assert predictor({"text": SENTENCES[0]}) == results[0]
    for result in results:
        assert all(result["text"][e["start"] : e["end"]] == e["text"] for e in result["entities"])


def test_questions_in_memory_get_the_answers_of_a_squad_file(workdirs, tmp_path):
    context = "张三在北京大学读书，毕业后去了上海工作。"
    questions = ["张三在哪里读书？", "张三毕业后去了哪里？"]
    qas = [dict(id=f"q{i}", question=q, answers=[]) for i, q in enumerate(questions)]
    squad = dict(data=[dict(title="", paragraphs=[dict(context=context, qas=qas)])])
    written = _written(workdirs["mrc"], [json.dumps(squad, ensure_ascii=False)], tmp_path, "q.json")
    predictor = zhlm.pipeline(workdirs["mrc"])
    assert predictor.inputs == ("question", "context")
    results = predictor([(q, context) for q in questions])
    assert [r["answer"] for r in results] == [r["answer"] for r in written]
    assert [r["score"] for r in results] == pytest.approx([r["score"] for r in written], rel=1e-5)
    assert results[0]["question"] == questions[0] and results[0]["context"] == context
    assert written[0]["question"] == questions[0] and written[0]["id"] == "q0"


def test_inputs_that_do_not_fit_the_kind_say_what_it_predicts(workdirs):
    predictor = zhlm.pipeline(workdirs["classification"])
    with pytest.raises(
        ValueError, match=r"input 0 is a tuple of 2; kind classification predicts a str"
    ):
        predictor(("很好", "不好"))
    with pytest.raises(
        ValueError, match=r"input 1 has fields \['txt'\]; .* reads \{\"text\": \.\.\.\}"
    ):
        predictor([{"text": "好"}, {"txt": "好"}])
    with pytest.raises(ValueError, match="input 0: text is ' '; give a non-empty string"):
        predictor([" "])
    with pytest.raises(ValueError, match="input 1: id 'a' given twice"):
        predictor([{"text": "好", "id": "a"}, {"text": "坏", "id": "a"}])
    with pytest.raises(TypeError, match="a int to predict; kind classification predicts"):
        predictor(3)


@pytest.mark.slow
def test_a_hugging_face_task_folder_predicts_what_transformers_computes(tmp_path):
    """A ``BertForSequenceClassification`` folder (labels in ``id2label``, a ``vocab.txt``)
    and a ``BertForTokenClassification`` one: labels named as the folder names them, and the
    probabilities / tags transformers gives for the same ids."""
    import shutil

    import numpy as np
    import torch
    from helpers import hf_folder

    from zhlm.data.tokenizer import WordPiece, default_vocab
    from zhlm.finetune.metrics import conlleval

    names = {0: "negative", 1: "neutral", 2: "positive"}
    hf, path = hf_folder(tmp_path, "BertForSequenceClassification", id2label=names)
    shutil.copy(default_vocab(), f"{path}/vocab.txt")
    predictor = zhlm.pipeline(path)
    results = predictor(REVIEWS)
    ids = [[101, *WordPiece(default_vocab()).encode_batch([t])[0].ids, 102] for t in REVIEWS]
    for text, row, result in zip(REVIEWS, ids, results, strict=True):
        with torch.no_grad():
            logits = hf(torch.tensor([row])).logits[0].numpy()
        expected = np.exp(logits - logits.max())
        expected /= expected.sum()
        assert result["text"] == text and list(result["probabilities"]) == list(names.values())
        np.testing.assert_allclose(list(result["probabilities"].values()), expected, atol=1e-5)
        assert result["label"] == names[int(np.argmax(expected))]
    assert zhlm.pipeline(path, kind="pair")(PAIRS[0])["label"] in names.values()

    tags = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
    hf, path = hf_folder(tmp_path, "BertForTokenClassification", id2label=tags)
    shutil.copy(default_vocab(), f"{path}/vocab.txt")
    entities = zhlm.pipeline(path)(SENTENCES[0])["entities"]
    with torch.no_grad():
        chars = [WordPiece(default_vocab()).encode_batch([c])[0].ids[0] for c in SENTENCES[0]]
        guess = hf(torch.tensor([[101, *chars, 102]])).logits[0, 1:-1].argmax(-1).tolist()
    expected = conlleval.entities([tags[t] for t in guess])  # conlleval's chunks
    assert [(e["type"], e["start"], e["end"]) for e in entities] == expected


@pytest.mark.slow
def test_a_folder_that_is_no_task_model_is_refused(tmp_path):
    from helpers import hf_folder

    _, path = hf_folder(tmp_path, "BertForPreTraining")
    with pytest.raises(ValueError, match="no task model zhlm predicts with"):
        zhlm.pipeline(path)


def _unseen_texts(n, seed):
    """Sentences of 2 to 40 characters that no other test reads."""
    rs = np.random.RandomState(seed)
    chars = list("我们今天去北京大学看李明和王芳，上海的天气很好。公司发布了新产品")
    return ["".join(rs.choice(chars, k)) for k in rs.randint(2, 41, n)]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["classification", "ner"])
def test_packed_and_unpacked_predictions_agree(workdirs, kind):
    texts = _unseen_texts(40, seed=7)
    results = {}
    for pack in (True, False):
        predictor = zhlm.pipeline(workdirs[kind], pack=pack)
        predictor.task.max_seq_length = 64  # rows of 64: up to 4 texts share one packed
        results[pack] = predictor(texts)
    packed, unpacked = results[True], results[False]
    if kind == "ner":
        assert packed == unpacked
        return
    assert [r["label"] for r in packed] == [r["label"] for r in unpacked]
    for ours, theirs in zip(packed, unpacked, strict=True):
        assert ours["probabilities"] == pytest.approx(theirs["probabilities"], abs=1e-4)


# ---------------------------------------------------------------- length and batch, as asked


@pytest.mark.slow
def test_a_length_and_batch_asked_for_predict_as_inputs_already_cut(workdirs):
    """A classifier run at 32 tokens asked for 12 (and 2 inputs a batch) predicts what it
    predicts, at its own length, for the inputs cut to 10 tokens ([CLS] and [SEP] make 12)."""
    asked = zhlm.pipeline(workdirs["classification"], max_seq_length=12, batch_size=2)
    assert asked.settings == "length 12 (asked), batch 2 (asked)"
    assert asked.task.max_seq_length == 12
    default = zhlm.pipeline(workdirs["classification"])
    assert default.settings == (
        "length 32 (the fine-tuning run's), batch 32 (the fine-tuning run's)"
    )
    results = asked(LONG_REVIEWS)
    _same_classes(results, default(cut_to_tokens(LONG_REVIEWS, 10)))
    assert [r["text"] for r in results] == LONG_REVIEWS  # the inputs as given
    # 3 rows of 12 real tokens in 2 batches of 2 rows: 36 of 48 positions
    assert asked.summary.startswith("3 inputs in ") and "real tokens 75% of" in asked.summary
    with pytest.raises(ValueError, match="max_seq_length=1: give a number of tokens from 2"):
        zhlm.pipeline(workdirs["classification"], max_seq_length=1)


@pytest.mark.slow
def test_a_hugging_face_folder_cut_to_a_length_predicts_as_transformers_truncating(tmp_path):
    """``zhlm.pipeline(folder, max_seq_length=N)`` gives ``transformers.pipeline``'s
    probabilities with ``truncation=True, max_length=N``; its default is the folder's position
    table, and a length above it is refused in one line."""
    import shutil

    import transformers
    from helpers import hf_folder

    from zhlm.data.tokenizer import default_vocab

    names = {0: "negative", 1: "positive"}
    _, path = hf_folder(
        tmp_path, "BertForSequenceClassification", id2label=names, max_position_embeddings=40
    )
    shutil.copy(default_vocab(), f"{path}/vocab.txt")
    theirs = transformers.pipeline("text-classification", model=path, device="cpu")
    expected = theirs(LONG_REVIEWS, top_k=None, truncation=True, max_length=16)
    ours = zhlm.pipeline(path, max_seq_length=16, batch_size=2)
    assert ours.settings == "length 16 (asked), batch 2 (asked)"
    for result, scores in zip(ours(LONG_REVIEWS), expected, strict=True):
        want = {s["label"]: s["score"] for s in scores}
        assert result["probabilities"] == pytest.approx(want, abs=1e-4)
        assert result["label"] == max(want, key=want.get)
    # zhlm-predict's own function, on a file of the same inputs
    written = _written(path, LONG_REVIEWS, tmp_path, "long.txt", max_seq_length=16, batch_size=2)
    for record, scores in zip(written, expected, strict=True):
        want = {s["label"]: s["score"] for s in scores}
        assert record["probabilities"] == pytest.approx(want, abs=1e-4)
    table = zhlm.pipeline(path)
    assert table.settings == "length 40 (the folder's position table), batch 32 (the default)"
    with pytest.raises(ValueError) as refused:
        zhlm.pipeline(path, max_seq_length=41)
    assert str(refused.value) == (
        "max_seq_length=41 is above the model's position table (40 rows): give 40 or less"
    )
