"""Length buckets (``zhlm.finetune.batching``): which bucket each row goes to, the seeded
training order, per-token arrays cut and outputs padded back in input order, bucketed
predictions equal to full-length ones for every registered kind, a reproducible seeded run, and
one compiled program per bucket with rows."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import SAMPLES, read_task, run_seed_twice

from zhlm import defaults
from zhlm.finetune import batching, kinds, saved
from zhlm.finetune import train as train_lib
from zhlm.models import model_config


def _arrays(lengths, width=128, options=None):
    """Rows whose masks hold ``lengths`` real tokens ([N,C,S] with ``options``: the row's
    length on its first option, shorter ones on the others)."""
    shape = (len(lengths), width) if options is None else (len(lengths), options, width)
    mask = np.zeros(shape, np.int32)
    for row, n in enumerate(lengths):
        mask[row, ..., :n] = 1
        if options is not None:
            mask[row, 1:, n // 2 :] = 0
    ids = mask * (1 + np.arange(len(lengths)))[(slice(None),) + (None,) * (mask.ndim - 1)]
    return dict(
        input_ids=ids, token_type_ids=np.zeros_like(mask), attention_mask=mask,
        label=np.arange(len(lengths), dtype=np.int32),
    )  # fmt: skip


def test_rows_go_to_the_smallest_bucket_that_holds_their_tokens():
    assert batching.bucket_lengths((), 128) == (32, 64, 128)
    assert batching.bucket_lengths((), 200) == (32, 64, 128, 200)
    assert batching.bucket_lengths((), 32) == (32,)
    assert batching.bucket_lengths((64,), 128) == (64, 128)
    assert batching.bucket_lengths((128,), 128) == (128,)  # buckets off
    for bad in ((64, 32), (0, 64), (256,), (32, 32)):
        with pytest.raises(ValueError, match="length_buckets"):
            batching.bucket_lengths(bad, 128)
    buckets = batching.Buckets.of(_arrays([3, 32, 33, 64, 65, 128, 0]))
    assert buckets.lengths == (32, 64, 128)
    assert buckets.of_row.tolist() == [0, 0, 1, 1, 2, 2, 0]
    assert buckets.programs == 3 and buckets.describe() == "32/64/128 (rows 3/2/2)"
    options = batching.Buckets.of(_arrays([20, 40, 100], options=3))
    assert options.of_row.tolist() == [0, 1, 2] and options.positions_per_token == 3
    gap = _arrays([10])
    gap["attention_mask"][0, 40] = 1  # a real position past a gap still counts
    assert batching.row_lengths(gap).tolist() == [41]


def test_training_order_is_the_seeds_and_every_batch_comes_from_one_bucket():
    arrays = _arrays([5, 40, 7, 90, 12, 33, 100, 8, 9, 70, 20])
    buckets = batching.Buckets.of(arrays)

    def plan(seed):
        return [(n, rows.tolist()) for n, rows in buckets.plan(4, np.random.RandomState(seed))]

    assert plan(0) == plan(0)
    assert plan(0) != plan(1)
    rows = [i for _, r in plan(0) for i in r]
    assert sorted(rows) == list(range(11))  # every row once an epoch
    assert len(plan(0)) == buckets.num_batches(4) == 2 + 1 + 1
    for length, r in plan(0):
        assert all(buckets.lengths[buckets.of_row[i]] == length for i in r)
    in_order = [(n, r.tolist()) for n, r in buckets.plan(4)]  # evaluation
    assert in_order == [(32, [0, 2, 4, 7]), (32, [8, 10]), (64, [1, 5]), (128, [3, 6, 9])]
    batch = batching.batch(arrays, np.array([8, 10]), 4, 32)
    assert batch["input_ids"].shape == (4, 32) and batch["label"].tolist() == [8, 10, 8, 8]
    assert batch["weight"].tolist() == [1, 1, 0, 0]  # filled with the first row, weight 0
    options = batching.batch(_arrays([3], options=2), np.array([0]), 2, 32)
    assert options["input_ids"].shape == (2, 2, 32) and options["label"].shape == (2,)
    # 2 batches of 32 positions a row, 1 of 64 and 1 of 128, 4 rows each
    assert buckets.computed_positions(4) == 4 * (2 * 32 + 64 + 128)


def test_real_token_fraction_counts_the_bucket_lengths_computed():
    arrays = _arrays([30, 30, 60, 100])
    data = types.SimpleNamespace(
        train=arrays, train_batches=batching.Buckets.of(arrays), num_train_examples=4
    )
    speed = train_lib._throughput(data, 2, 1.0)
    assert speed["real_token_fraction"] == pytest.approx(220 / (2 * (32 + 64 + 128)))


def _forward(batch):
    """A stand-in forward pass: a per-token output, a per-row one, and one whose last axis is
    32 wide whatever the length (32 classes)."""
    tokens = batch["input_ids"].astype(jnp.float32)
    return dict(per_token=tokens * 2, row=batch["label"] + 1, classes=jnp.ones((len(tokens), 32)))


@pytest.mark.parametrize("lengths", [[5, 90, 7, 40, 128, 12], [5, 7, 12]])
def test_outputs_come_back_in_input_order_padded_to_the_full_length(lengths):
    arrays = _arrays(lengths)
    outputs = batching.run(_forward, arrays, 4)
    assert outputs["row"].tolist() == [i + 1 for i in range(len(lengths))]
    assert outputs["classes"].shape == (len(lengths), 32)  # not taken for per-token
    per_token = outputs["per_token"]
    assert per_token.shape == (len(lengths), 128)
    buckets = batching.Buckets.of(arrays)
    for row, bucket in enumerate(np.asarray(buckets.lengths)[buckets.of_row]):
        expected = 2 * arrays["input_ids"][row, :bucket]
        np.testing.assert_array_equal(per_token[row, :bucket], expected)
        assert np.all(per_token[row, bucket:] == batching.FLOAT_PAD)


# (max_seq_length, length_buckets) that spread each kind's sample over several buckets (MRC's
# windows fill max_seq_length unless a whole passage fits: its 3 passages have 296-497 tokens).
SPREAD = {"classification": (128, ()), "ner": (64, ()), "mrc": (512, (320, 448))}


@pytest.mark.parametrize("name", sorted(kinds.KINDS))
def test_bucketed_predictions_equal_full_length_ones(name, tmp_path, tokenizer):
    fmt, write, overrides = SAMPLES[name]
    path = str(write(tmp_path))
    config = defaults.get_finetune_config("tiny")
    config.task.update(dict(kind=name, format=fmt, train_file=path, dev_file=path, **overrides))
    length, buckets = SPREAD.get(name, (64, ()))
    config.task.update(max_seq_length=length, length_buckets=buckets)
    task, kind = config.task, kinds.get(name)
    _, evaluation, _ = read_task(task)
    features = kind.featurize(evaluation, tokenizer, task, training=False)
    arrays = features.arrays
    model = kind.model(model_config(config.model), task)
    params = saved.init_params(model, jax.random.key(0), kind.example_inputs(task))
    apply = jax.jit(
        lambda b: kind.device_outputs(model.apply({"params": params}, *batching.model_inputs(b)), b)
    )
    runs = [batching.run(apply, arrays, 8, b) for b in (buckets, (length,))]
    bucketed, unbucketed = runs
    if name in SPREAD:
        assert batching.Buckets.of(arrays, buckets).programs >= 2, "nothing cut to compare"
    real = arrays["attention_mask"] > 0
    for out, ours in bucketed.items():
        theirs = unbucketed[out]
        assert ours.shape == theirs.shape, out
        if ours.shape[: real.ndim] == real.shape:  # per-token: equal at the real tokens
            ours, theirs = ours[real], theirs[real]
        np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5, err_msg=out)
    decoded = [kind.decode(features, o, evaluation, task) for o in (bucketed, unbucketed)]
    records = [kind.records(evaluation, d, task) for d in decoded]
    assert [r["id"] for r in records[0]] == [r["id"] for r in records[1]]
    for a, b in zip(*records, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], dict):  # probabilities
                assert a[key] == pytest.approx(b[key], abs=1e-5)
            elif isinstance(a[key], float):  # an MRC answer's score
                assert a[key] == pytest.approx(b[key], abs=1e-4)
            else:
                assert a[key] == b[key], key


@pytest.mark.slow
def test_a_seeded_run_repeats_and_compiles_once_per_bucket(tmp_path, tokenizer):
    fmt, write, _ = SAMPLES["pair"]
    path = str(write(tmp_path))
    config = defaults.get_finetune_config("tiny")
    config.task.update(kind="pair", format=fmt, train_file=path, dev_file=path, max_seq_length=64)
    config.task.pack = False  # buckets (tests/finetune/test_packing.py: one program packed)
    config.train.update(batch_size=4, epochs=2, log_every=0)
    kind = kinds.get("pair")
    data = train_lib._Data(config, kind, tokenizer)
    assert data.train_batches.programs == 2  # rows of 32 and of 64 tokens
    steps = config.train.epochs * data.train_batches.num_batches(4)
    trainer = train_lib.task_trainer(config, kind, steps)
    runs = run_seed_twice(config, kind, data, trainer, tmp_path)
    assert runs[0]["history"] == runs[1]["history"]  # every epoch's loss and dev metrics
    for a, b in zip(
        jax.tree.leaves(runs[0]["params"]), jax.tree.leaves(runs[1]["params"]), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    # Two seeds' runs of two epochs each: one program per bucket with rows, no recompilation.
    assert trainer.step_fn._cache_size() == data.train_batches.programs
    assert trainer.forward_fn._cache_size() == data.eval_programs
