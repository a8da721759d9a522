"""The regression kind (STS-B): scores read as numbers and bad ones reported, the training-set
checks, features in classification's layout, Hugging Face's MSE loss, Pearson and Spearman
against scipy, the prior, the records and the export config; the STS-B config."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import load_task

from zhlm import defaults
from zhlm.finetune import kinds
from zhlm.finetune.kinds.base import Features
from zhlm.finetune.kinds.classification import classification_features
from zhlm.finetune.metrics.correlation import average_ranks, pearson
from zhlm.finetune.readers import tables
from zhlm.finetune.readers.tables import NUMBERS, TableReader

KIND = kinds.get("regression")


def _read(path, task, reader=KIND.reader):
    examples, report = reader.read(path, task)
    return list(examples), report


def _task(path="", **overrides):
    task = defaults.get_finetune_config("tiny").task
    task.update(dict(kind="regression", train_file=str(path), dev_file=str(path), **overrides))
    return task


def _write(tmp_path, text, name="sts.tsv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------- reading


def test_scores_are_read_as_numbers_and_the_rest_reported_with_their_line(tmp_path):
    rows = ["今天天气好\t天气不错\t4.2", "你好\t再见\t0", "甲\t乙\tfive", "丙\t丁\tnan", "a\tb\t5"]
    path = _write(tmp_path, "\n".join(rows) + "\n")
    examples, report = _read(path, _task(path))
    assert [(e.text_a, e.label, e.line) for e in examples] == [
        ("今天天气好", "4.2", 1),
        ("你好", "0", 2),
        ("a", "5", 5),
    ]
    assert [(i.line, i.kind) for i in report.issues] == [(3, "unknown_label"), (4, "unknown_label")]
    assert "column 2 'five' not in the finite numbers" in str(report.issues[0])
    assert report.records == 3


def test_one_text_scores_stream_as_they_are_read(tmp_path):
    path = _write(tmp_path, "好评\t4.5\n差评\tx\n一般\t2\n")
    examples, report = TableReader(texts=1, scores=True).read(path, _task(path))
    assert [(e.text, e.label) for e in examples] == [("好评", "4.5"), ("一般", "2")]
    assert report.records == 2 and [i.line for i in report.issues] == [2]


def test_scores_from_json_numbers_and_a_named_column(tmp_path):
    path = _write(
        tmp_path,
        '{"sentence1": "好", "sentence2": "坏", "score": 0.8}\n'
        '{"sentence1": "是", "sentence2": "否", "score": 3}\n',
        "sts.jsonl",
    )
    examples, report = _read(path, _task(path, format="jsonl", label_field="score"))
    assert [e.label for e in examples] == ["0.8", "3"] and report.ok


def test_a_label_set_keeps_its_message():
    report = tables.ReadReport("x")
    assert tables._LabelReader(["0", "1"], True, None, report, None)("2", 7) is tables._SKIP
    assert report.issues[0].message == "label '2' not in ['0', '1']"
    assert "3.5" in NUMBERS and "-1e3" in NUMBERS and "inf" not in NUMBERS and "" not in NUMBERS


# ---------------------------------------------------------------------- what training needs


def test_a_training_set_of_one_score_is_refused_with_why(tmp_path):
    path = _write(tmp_path, "好\t坏\t2.5\n是\t否\t2.5\n")
    task = _task(path)
    train, _ = _read(path, task)
    KIND.settle(task, train)
    with pytest.raises(ValueError, match=r"every training record has score 2.5; a regression"):
        KIND.training_examples(task, train)


def test_task_labels_do_not_apply(tmp_path):
    path = _write(tmp_path, "好\t坏\t2.5\n是\t否\t1\n")
    task = _task(path, labels=("0", "1"))
    train, _ = _read(path, task)
    with pytest.raises(ValueError, match=r"^config.task.labels=\('0', '1'\) does not apply"):
        KIND.settle(task, train)


# ---------------------------------------------------------------------- features and loss


def test_features_are_the_pair_layout_with_float_scores(tokenizer):
    examples = [
        tables.PairExample("g0", "今天天气很好", "明天下雨", "4.5", 1),
        tables.PairExample("g1", "好", "坏", "0", 2),
        tables.PairExample("g2", "是", "否", None, 3),  # an input to predict
    ]
    arrays = KIND.featurize(examples, tokenizer, _task(max_seq_length=10), training=True).arrays
    layout = classification_features(examples[:2], tokenizer, ("4.5", "0"), 10)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        np.testing.assert_array_equal(arrays[key][:2], layout[key])
    assert arrays["label"].dtype == np.float32
    assert arrays["label"][:2].tolist() == [4.5, 0.0] and math.isnan(arrays["label"][2])


def test_loss_is_hugging_faces_mse_of_the_squeezed_logits():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    logits, scores = rng.normal(size=(6, 1)), rng.uniform(0, 5, size=6)
    weight = np.array([1, 1, 1, 1, 0, 0], np.float32)  # the last two rows pad the batch
    row_sum, row_count = KIND.loss({"logits": jnp.asarray(logits)}, {"label": jnp.asarray(scores)})
    ours = jnp.sum(row_sum * weight) / jnp.sum(row_count * weight)
    theirs = torch.nn.MSELoss()(torch.tensor(logits[:4]).squeeze(), torch.tensor(scores[:4]))
    np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-6)


# --------------------------------------------------------------------------------- results


def test_pearson_and_spearman_match_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    gold = rng.integers(0, 6, 50).astype(np.float64)  # scores 0-5: many ties
    guess = gold + rng.normal(0, 2, 50)
    guess[:10] = 2.0  # tied predictions too
    np.testing.assert_allclose(average_ranks(gold), stats.rankdata(gold))
    scores = KIND.score(_gold(gold), None, guess)
    np.testing.assert_allclose(scores["pearson"], 100 * stats.pearsonr(gold, guess)[0])
    np.testing.assert_allclose(scores["spearman"], 100 * stats.spearmanr(gold, guess)[0])
    np.testing.assert_allclose(scores["mse"], np.mean((gold - guess) ** 2))
    assert KIND.metric == "spearman"


def test_a_constant_prediction_correlates_zero():
    scores = KIND.score(_gold(np.array([1.0, 2.0, 3.0])), None, np.full(3, 2.5))
    assert scores["pearson"] == scores["spearman"] == 0.0
    assert pearson(np.array([1.0]), np.array([2.0])) == 0.0


def test_prior_is_the_mse_of_the_training_mean_and_records_carry_the_score():
    scores = np.array([0.0, 1.0, 5.0, 2.0], np.float32)
    variance = np.mean((scores - scores.mean()) ** 2)
    assert KIND.chance({"label": scores}) == {
        "loss": pytest.approx(variance),
        "constant_mse": pytest.approx(3.5),
    }
    examples = [
        tables.PairExample("a", "x", "y", None, 1),
        tables.PairExample("b", "x", "y", None, 2),
    ]
    records = KIND.records(examples, np.array([1.5, 4.0], np.float32), None)
    assert records == [{"id": "a", "score": 1.5}, {"id": "b", "score": 4.0}]


def test_the_export_is_a_one_output_regression_head():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(**KIND.export.config(_task()))
    assert (config.num_labels, config.problem_type) == (1, "regression")
    assert KIND.export.hf_class == "ForSequenceClassification"


def test_the_stsb_config():
    config = load_task("stsb", shared=False)
    assert (config.task.kind, config.task.format, config.task.labels) == ("regression", "tsv", ())
    assert config.model.size == "tiny" and not config.task.train_file


def _gold(scores) -> Features:
    return Features({"label": np.asarray(scores, np.float32)})
