"""Packed fine-tuning rows: every kind that packs reads out each example exactly as it is
unpacked, and the packing is deterministic and tight.

Why this is the test of packing: a packed row is only a saving if each example inside it is
computed as it would be alone (positions from 0, its own token types, attention within the
example, its own [CLS] pooled). The same examples go through a random tiny model unpacked
(one a row, full length) and packed (:mod:`zhlm.finetune.packing`, several a row, in batches
that leave rows empty), and the outputs per example, and the loss, agree to 1e-5 in float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zhlm import defaults
from zhlm.data.packing import best_fit
from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune import batching, kinds, packing, saved
from zhlm.finetune.readers.ner import NerExample
from zhlm.finetune.readers.tables import PairExample, SentenceExample
from zhlm.models import model_config

S = 64  # K = 4 examples per row at most
CHARS = "的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会"
LABELS = ("0", "1", "2")
TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")


@pytest.fixture(scope="module")
def tokenizer():
    return WordPiece(default_vocab())


def _texts(n, seed, longest=40):
    rs = np.random.RandomState(seed)
    lengths = np.concatenate([rs.randint(2, 12, n - n // 4), rs.randint(12, longest, n // 4)])
    return ["".join(rs.choice(list(CHARS), k)) for k in rs.permutation(lengths)]


def _examples(kind_name, n=23):
    texts, others = _texts(n, 0), _texts(n, 1, longest=20)
    labels = [LABELS[i % 3] for i in range(n)]
    if kind_name == "classification":
        return [SentenceExample(str(i), t, labels[i]) for i, t in enumerate(texts)]
    if kind_name in ("pair", "regression"):
        if kind_name == "regression":
            labels = [f"{i % 5 * 0.7:.1f}" for i in range(n)]
        return [
            PairExample(str(i), a, b, labels[i])
            for i, (a, b) in enumerate(zip(texts, others, strict=True))
        ]
    rs = np.random.RandomState(2)
    return [NerExample(str(i), t, tuple(rs.choice(TAGS, len(t)))) for i, t in enumerate(texts)]


def _setup(kind_name, tokenizer, max_seq_length=S):
    config = defaults.get_finetune_config("tiny")
    task = config.task
    task.kind, task.max_seq_length, task.doc_stride = kind_name, max_seq_length, 16
    task.labels = TAGS if kind_name == "ner" else () if kind_name == "regression" else LABELS
    config.model.dropout_rate = 0.0
    kind = kinds.get(kind_name)
    model = kind.model(model_config(config.model), task)
    params = saved.init_params(model, jax.random.key(0), kind.example_inputs(task))
    features = kind.featurize(_examples(kind_name), tokenizer, task, training=True)
    return kind, model, params, features


@pytest.mark.slow
@pytest.mark.parametrize("kind_name", ["classification", "pair", "regression", "ner"])
def test_packed_examples_have_their_unpacked_outputs_and_loss(kind_name, tokenizer):
    kind, model, params, features = _setup(kind_name, tokenizer)
    arrays = features.arrays
    forward = jax.jit(
        lambda b: model.apply(
            {"params": params}, *batching.model_inputs(b), **batching.packed_inputs(b)
        )
    )
    alone = batching.run(forward, arrays, 8, (S,))
    together = packing.run(forward, arrays, 8, kind.readout)
    layout = packing.Layout.of(batching.row_lengths(arrays), S)
    assert layout.num_rows < len(arrays["input_ids"]) / 2  # rows hold several examples
    assert max(len(m) for m in layout.members) <= packing.max_examples(S)
    logits, want = together["logits"], alone["logits"]
    if kind.readout == "token":
        real = arrays["attention_mask"] > 0
        np.testing.assert_allclose(logits[real], want[real], atol=1e-5)
        assert np.all(logits[~real] == batching.FLOAT_PAD)
    else:
        np.testing.assert_allclose(logits, want, atol=1e-5)

    # The loss: a sum over real examples (tokens for NER) over their count, packed or not
    # (batches of the shapes above, whose programs have compiled).
    def loss(batches):
        sums = np.zeros(2)
        for batch in batches:
            row_sum, row_count = kind.loss(forward(batch), batch)
            sums += [jnp.sum(row_sum * batch["weight"]), jnp.sum(row_count * batch["weight"])]
        return sums[0] / sums[1]

    n, rows = len(arrays["input_ids"]), packing.forward_rows(8, layout)
    unpacked = loss(batching.batch(arrays, np.arange(n)[i : i + 8], 8) for i in range(0, n, 8))
    packed = loss(
        packing.batch(arrays, layout, range(i, min(i + rows, layout.num_rows)), rows, kind.readout)
        for i in range(0, layout.num_rows, rows)
    )
    np.testing.assert_allclose(packed, unpacked, rtol=1e-5)


def test_best_fit_decreasing_is_deterministic_and_tight():
    rs = np.random.RandomState(0)
    lengths = np.minimum(rs.geometric(1 / 18, 2000) + 10, 100)  # LCQMC-like pairs: mean 28
    first = packing.Layout.of(lengths, 128)
    again = packing.Layout.of(lengths.copy(), 128)
    assert all(np.array_equal(a, b) for a, b in zip(first.members, again.members, strict=True))
    assert first.real_token_fraction() > 0.95
    used = np.array([lengths[m].sum() for m in first.members])
    assert used.max() <= 128 and max(len(m) for m in first.members) <= 8
    placed = np.sort(np.concatenate(first.members))
    np.testing.assert_array_equal(placed, np.arange(len(lengths)))
    # Each example starts where the ones before it in its row end.
    for m in first.members[:50]:
        np.testing.assert_array_equal(first.start[m], np.cumsum(lengths[m]) - lengths[m])


def test_best_fit_takes_the_fullest_row_that_fits_and_closes_the_oldest():
    assert best_fit([6, 5, 4, 3, 2], 10, 4, None) == [[0, 2], [1, 3, 4]]  # 4 fills 6, not 5
    assert best_fit([9, 9, 1, 1], 10, 4, 1) == [[0], [1, 2], [3]]  # row 0 closed by row 1
    assert best_fit([1, 1, 1], 10, 2, None) == [[0, 1], [2]]  # at most ``slots`` items


def test_every_epoch_packs_every_example_once_into_steps_of_one_shape():
    rs = np.random.RandomState(0)
    lengths = np.minimum(rs.geometric(1 / 18, 300) + 10, 100)
    arrays = dict(
        input_ids=(np.arange(128) < lengths[:, None]).astype(np.int32) * 7,
        token_type_ids=np.zeros((300, 128), np.int32),
        attention_mask=(np.arange(128) < lengths[:, None]).astype(np.int32),
        label=np.arange(300, dtype=np.int32),
    )
    epochs = packing.Epochs(arrays, 32, "instance", seeds=[0, 1], epochs=3, multiple=2)
    assert epochs.rows_per_step % 2 == 0 and epochs.programs == 1
    rng = np.random.RandomState(1)
    orders = set()
    for _ in range(3):
        plan = epochs.plan(32, rng)
        assert len(plan) == epochs.num_batches(32)
        batches = [epochs.batch(arrays, entry, 32) for entry in plan]
        assert {b["input_ids"].shape for b in batches} == {(epochs.rows_per_step, 128)}
        labels = np.concatenate([b["label"][b["weight"] > 0] for b in batches])
        np.testing.assert_array_equal(np.sort(labels), np.arange(300))  # each example once
        per_step = [b["weight"].sum() for b in batches]
        assert 20 <= np.mean(per_step) <= 44  # about batch_size examples a step
        orders.add(tuple(labels))
    assert len(orders) == 3  # a new order every epoch


@pytest.mark.slow
def test_a_packed_run_compiles_one_program_and_repeats(tmp_path, tokenizer):
    from helpers import SAMPLES, run_seed_twice

    from zhlm.finetune import train as train_lib

    fmt, write, _ = SAMPLES["pair"]
    path = str(write(tmp_path))
    config = defaults.get_finetune_config("tiny")
    config.task.update(kind="pair", format=fmt, train_file=path, dev_file=path, max_seq_length=64)
    config.train.update(batch_size=8, epochs=2, log_every=0)
    kind = kinds.get("pair")
    data = train_lib._Data(config, kind, tokenizer)
    assert isinstance(data.train_batches, packing.Epochs)
    steps = config.train.epochs * data.train_batches.num_batches(8)
    trainer = train_lib.task_trainer(config, kind, steps)
    runs = run_seed_twice(config, kind, data, trainer, tmp_path)
    assert runs[0]["history"] == runs[1]["history"]
    assert all(np.isfinite(r["train_loss"]) for r in runs[0]["history"])
    assert trainer.step_fn._cache_size() == 1 and trainer.forward_fn._cache_size() == 1
