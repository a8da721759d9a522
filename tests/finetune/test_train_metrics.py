"""``zhlm.finetune.train``'s lines in ``metrics.jsonl``: per epoch its speed (examples and real
tokens per second, the share of computed positions that are real tokens), per logged step the
loss and learning rate; and the warmup the run takes from its config."""

import json
import math

import numpy as np
import pytest
from helpers import load_task, read_task

from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.errors import UserError
from zhlm.finetune import kinds
from zhlm.finetune.train import finetune, settle_warmup, warmup_steps
from zhlm.train import metrics


@pytest.mark.slow
def test_each_epoch_records_its_speed_and_real_token_share(tmp_path):
    config = load_task("chnsenticorp")
    config.unlock()
    config.task.max_seq_length = 64
    config.task.pack = False  # buckets (tests/finetune/test_packing.py: packed epochs)
    config.train.update(epochs=2, seeds=1, batch_size=16, log_every=0, max_train_examples=40,
                        max_eval_examples=16, save_best=False)  # fmt: skip
    finetune(config, None, str(tmp_path))
    lines = metrics.read(str(tmp_path), "seed0")

    train, _, _ = read_task(load_task("chnsenticorp").task)
    kind = kinds.get("classification")
    task = load_task("chnsenticorp").task
    task.unlock()
    task.max_seq_length = 64
    arrays = kind.featurize(train[:40], WordPiece(default_vocab()), task, training=True).arrays
    real = int(np.sum(arrays["attention_mask"]))
    # Batches of 16 rows within the length buckets 32 and 64, the last of each filled.
    short = int(np.sum(arrays["attention_mask"].sum(-1) <= 32))
    batches = (math.ceil(short / 16), math.ceil((40 - short) / 16))
    computed = 16 * (batches[0] * 32 + batches[1] * 64)
    assert 0 < short < 40
    # One line per epoch, at its last step (as many steps as batches in each bucket).
    steps = sum(batches)
    assert [(line["epoch"], line["step"]) for line in lines] == [(1, steps), (2, 2 * steps)]
    expected = real / computed
    for line in lines:
        assert line["real_token_fraction"] == expected
        assert line["examples_per_second"] > 0
        assert line["tokens_per_second"] == pytest.approx(line["examples_per_second"] * real / 40)


@pytest.mark.slow
def test_warmup_steps_given_warm_up_over_exactly_those_steps_and_the_config_says_so(tmp_path):
    """``--config.optim.warmup_steps=3`` takes the place of the default warmup_ratio: the
    learning rate rises over 3 steps (logged every step with the loss), and config.json shows
    warmup_ratio 0, so the saved config is the run's."""
    config = load_task("chnsenticorp")
    config.unlock()
    config.task.max_seq_length = 32
    config.train.update(epochs=1, seeds=1, batch_size=8, log_every=1, max_train_examples=48,
                        max_eval_examples=8, save_best=False)  # fmt: skip
    config.optim.update(warmup_steps=3, peak_lr=1e-3)
    finetune(config, None, str(tmp_path))
    lines = [line for line in metrics.read(str(tmp_path), "seed0") if "epoch" not in line]
    rates = [line["learning_rate"] for line in lines]
    assert [line["step"] for line in lines] == list(range(1, len(lines) + 1))
    # Each line has the rate of its step: 0, 1/3, 2/3 of the peak, the peak, then decay to 0.
    np.testing.assert_allclose(rates[:4], [0.0, 1e-3 / 3, 2e-3 / 3, 1e-3], rtol=1e-5)
    assert all(a > b for a, b in zip(rates[3:], rates[4:], strict=False))
    assert all(line["train_loss"] > 0 for line in lines)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert (saved["optim"]["warmup_steps"], saved["optim"]["warmup_ratio"]) == (3, 0.0)


def test_warmup_keys_out_of_range_are_refused_naming_both():
    optim = load_task("chnsenticorp").optim
    optim.unlock()
    optim.warmup_steps = -2
    with pytest.raises(UserError, match=r"optim.warmup_steps=-2, optim.warmup_ratio=0.1: give"):
        settle_warmup(optim)
    optim.update(warmup_steps=-1, warmup_ratio=0.25)
    settle_warmup(optim)  # the ratio, as by default
    assert warmup_steps(optim, 100) == 25 and optim.warmup_ratio == 0.25


@pytest.mark.slow
def test_warmup_steps_as_long_as_the_run_are_refused_in_fine_tuning_terms(tmp_path):
    config = load_task("chnsenticorp")
    config.unlock()
    config.task.max_seq_length = 32
    config.train.update(epochs=1, batch_size=8, max_train_examples=16, max_eval_examples=8)
    config.optim.warmup_steps = 2
    with pytest.raises(UserError, match=r"^optim.warmup_steps=2 is not shorter than the run's 2 "
                       r"steps \(1 epoch\(s\) of 2 batches of 8\): give fewer"):  # fmt: skip
        finetune(config, None, str(tmp_path))
