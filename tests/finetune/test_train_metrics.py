"""``zhlm.finetune.train``'s per-epoch speed in ``metrics.jsonl``: examples and real tokens per
second, and the share of computed positions (batches in length buckets) that are real tokens."""

import math

import numpy as np
import pytest
from helpers import load_task, read_task

from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune import kinds
from zhlm.finetune.train import finetune
from zhlm.train import metrics


@pytest.mark.slow
def test_each_epoch_records_its_speed_and_real_token_share(tmp_path):
    config = load_task("chnsenticorp")
    config.unlock()
    config.task.max_seq_length = 64
    config.train.update(epochs=2, seeds=1, batch_size=16, log_every=0, max_train_examples=40,
                        max_eval_examples=16, save_best=False)  # fmt: skip
    finetune(config, None, str(tmp_path))
    lines = metrics.read(str(tmp_path), "seed0")
    assert [line["step"] for line in lines] == [1, 2]

    train, _, _ = read_task(load_task("chnsenticorp").task)
    kind = kinds.get("classification")
    task = load_task("chnsenticorp").task
    task.unlock()
    task.max_seq_length = 64
    arrays = kind.featurize(train[:40], WordPiece(default_vocab()), task, training=True).arrays
    real = int(np.sum(arrays["attention_mask"]))
    # Batches of 16 rows within the length buckets 32 and 64, the last of each filled.
    short = int(np.sum(arrays["attention_mask"].sum(-1) <= 32))
    computed = 16 * (math.ceil(short / 16) * 32 + math.ceil((40 - short) / 16) * 64)
    assert 0 < short < 40
    expected = real / computed
    for line in lines:
        assert line["real_token_fraction"] == expected
        assert line["examples_per_second"] > 0
        assert line["tokens_per_second"] == pytest.approx(line["examples_per_second"] * real / 40)
