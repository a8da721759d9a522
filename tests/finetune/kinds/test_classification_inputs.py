"""Classification that does not fail quietly (``zhlm.finetune.kinds.classification``): a
training set of one class is refused, a rare inferred label is named with its rows, dev
results carry macro-F1 and per-class scores (against scikit-learn), and a run that does not
beat the majority class says so."""

import numpy as np
import pytest
from helpers import load_task, read_task

from zhlm.finetune import kinds
from zhlm.finetune.kinds.classification import LabelledFeatures
from zhlm.finetune.train import finetune


def task_of(tmp_path, rows, holdout=0.2):
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in rows), encoding="utf-8")
    config = load_task("chnsenticorp", shared=False)
    config.unlock()
    config.task.update(train_file=str(path), dev_file="", holdout=holdout, labels=())
    return config


def test_a_label_sorted_file_keeps_both_classes_and_one_class_is_refused(tmp_path):
    rows = [("0", f"差评{i}") for i in range(20)] + [("1", f"好评{i}") for i in range(5)]
    train, held, _ = read_task(task_of(tmp_path, rows).task)
    assert [e.label for e in held].count("1") == 1 and [e.label for e in train].count("1") == 4
    rows = [("0", f"差评{i}") for i in range(20)]
    with pytest.raises(ValueError, match="every training record has label '0'; a classifier"):
        read_task(task_of(tmp_path, rows).task)


def test_a_rare_inferred_label_is_named_with_its_rows(tmp_path, capsys):
    rows = [(str(i % 2), f"评论{i}") for i in range(40)] + [("l", "一个打错的标签")]
    rows += [(str(i % 2), f"评论{i}") for i in range(40, 60)]
    read_task(task_of(tmp_path, rows, holdout=0.1).task)
    out = capsys.readouterr().out
    assert "warning: label 'l' has only 1 record(s)" in out and "(lines 42)" in out


def test_scores_have_macro_f1_and_each_class_as_scikit_learn_computes_them():
    from sklearn.metrics import f1_score, precision_recall_fscore_support

    rng = np.random.default_rng(0)
    gold = rng.integers(0, 3, 200)
    logits = rng.normal(size=(200, 3)) + 2.0 * np.eye(3)[gold] * (rng.random(200) < 0.6)[:, None]
    features = LabelledFeatures({"label": gold}, ("neg", "neu", "pos"))
    scores = kinds.get("classification").score(features, None, logits)
    guess = logits.argmax(-1)
    assert scores["macro_f1"] == pytest.approx(100 * f1_score(gold, guess, average="macro"))
    p, r, f, _ = precision_recall_fscore_support(gold, guess)
    for i, name in enumerate(("neg", "neu", "pos")):
        assert scores[f"precision/{name}"] == pytest.approx(100 * p[i])
        assert scores[f"recall/{name}"] == pytest.approx(100 * r[i])
        assert scores[f"f1/{name}"] == pytest.approx(100 * f[i])


@pytest.mark.slow
def test_a_run_at_the_majority_rate_is_flagged(tmp_path, capsys):
    """A random encoder with a learning rate of 0: it cannot beat the majority class."""
    rows = [("1" if i % 4 else "0", f"评论{i}") for i in range(64)]
    config = task_of(tmp_path, rows, holdout=0.25)
    config.optim.peak_lr = 0.0
    config.task.max_seq_length = 16
    config.train.update(epochs=1, seeds=1, batch_size=16, log_every=0, save_best=False)
    results = finetune(config, None, str(tmp_path / "run"))
    assert results["at_majority_rate"] is True
    assert "warning: no seed beat the majority class" in capsys.readouterr().out
