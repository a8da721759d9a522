"""Packed rows through the model: every instance's losses equal its unpacked ones.

Why this is the test of packing: a packed row is only a saving if each instance inside it is
computed exactly as it would be alone (positions from 0, attention within the instance, its own
[CLS] for the sentence head). The same instances with the same masked tokens go through the
model unpacked ([N,S], one per row) and packed (``zhlm.data.packing``), and the per-prediction
MLM and per-instance NSP/SOP losses must agree to 1e-5 in float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny

from zhlm.data import packing
from zhlm.models import build_model, init_variables
from zhlm.models.flash import flash_attention
from zhlm.models.layers import attention_mask_of, attention_with_dropout
from zhlm.train import objectives, sums

S, CLS, SEP, PAD, MASK = 128, 2, 3, 0, 4
LENGTHS = (20, 35, 50, 12, 60, 30, 100, 25, 9)  # packs into rows of 2-4 instances
PREDICTIONS = 3  # masked tokens per instance


def _instances(seed=0):
    """Unpacked rows ``[CLS] A [SEP] B [SEP]`` with PREDICTIONS tokens masked in each, a
    ``tag`` field (the instance's index on its real tokens) and the masked positions."""
    rs = np.random.RandomState(seed)
    rows, positions, targets = [], [], []
    for i, n in enumerate(LENGTHS):
        a = n // 2
        ids = np.full(S, PAD, np.int32)
        ids[1 : n - 1] = rs.randint(5, 97, n - 2)
        ids[[0, a, n - 1]] = CLS, SEP, SEP
        types = np.zeros(S, np.int32)
        types[a + 1 : n] = 1
        text = np.setdiff1d(np.arange(1, n - 1), [a])
        pos = np.sort(rs.choice(text, PREDICTIONS, replace=False)).astype(np.int32)
        targets.append(ids[pos].copy())
        ids[pos] = MASK
        row = dict(
            input_ids=ids,
            token_type_ids=types,
            attention_mask=(np.arange(S) < n).astype(np.int32),
            word_ids=np.where(np.isin(np.arange(S), text), np.arange(S), -1).astype(np.int32),
            tag=np.where(np.arange(S) < n, i, -1).astype(np.int32),
            sentence_label=np.int32(i % 2),
        )
        rows.append(row)
        positions.append(pos)
    return rows, np.stack(positions), np.stack(targets)


def _packed(rows, positions):
    """The packed rows and, for each instance, where its predictions and [CLS] went."""
    packed = packing.pack(rows, S, PAD)
    width = PREDICTIONS * packing.max_instances(S)
    masked = np.zeros((len(packed), width), np.int32)
    where = {}  # instance -> (row, prediction slots, instance slot)
    for r, row in enumerate(packed):
        for slot, start in enumerate(row["instance_starts"]):
            if row["segment_ids"][start] != slot + 1:
                continue  # an empty slot
            i = int(row["tag"][start])
            cols = np.arange(PREDICTIONS) + slot * PREDICTIONS
            masked[r, cols] = positions[i] + start
            where[i] = (r, cols, slot)
    assert sorted(where) == list(range(len(rows)))
    return packed, masked, where


def _stack(rows, names):
    return {n: jnp.asarray(np.stack([r[n] for r in rows])) for n in names}


def _losses(model, variables, batch, masked_positions, packed):
    out = model.apply(
        variables,
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        masked_positions=jnp.asarray(masked_positions),
        segment_ids=batch["segment_ids"] if packed else None,
        instance_starts=batch["instance_starts"] if packed else None,
    )
    return out


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["bert", "albert"])  # NSP; SOP with ALBERT's sharing
def test_packed_instances_have_their_unpacked_losses(recipe):
    config = tiny(recipe, max_position_embeddings=S)
    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))
    rows, positions, targets = _instances()
    packed, masked, where = _packed(rows, positions)
    assert len(packed) < len(rows)

    names = ("input_ids", "token_type_ids", "attention_mask")
    alone = _losses(model, variables, _stack(rows, names), positions, False)
    together = _losses(
        model, variables, _stack(packed, names + ("segment_ids", "instance_starts")), masked, True
    )
    labels = np.array([r["sentence_label"] for r in rows])
    want_mlm = objectives._nll_and_correct(alone["mlm_logits"], jnp.asarray(targets))[0]
    want_sentence = objectives._nll_and_correct(alone["sentence_logits"], labels)[0]
    packed_labels = np.stack([r["sentence_label"] for r in packed])
    got_sentence_all = objectives._nll_and_correct(
        together["sentence_logits"], jnp.maximum(packed_labels, 0)
    )[0]
    for i, (r, cols, slot) in where.items():
        got_mlm = objectives._nll_and_correct(
            together["mlm_logits"][r, cols], jnp.asarray(targets[i])
        )[0]
        np.testing.assert_allclose(got_mlm, want_mlm[i], atol=1e-5)
        assert packed_labels[r, slot] == labels[i]
        np.testing.assert_allclose(got_sentence_all[r, slot], want_sentence[i], atol=1e-5)

    # The loss of the batch: empty slots weigh nothing, so it is the mean over instances.
    loss, metrics = objectives.sentence_loss(
        together, {"sentence_label": jnp.asarray(packed_labels)}
    )
    assert float(metrics[f"sentence{sums.COUNT}"]) == len(rows)
    np.testing.assert_allclose(loss, jnp.mean(want_sentence), atol=1e-5)


def test_attention_never_crosses_instances():
    config = tiny("bert", max_position_embeddings=S)
    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))
    rows, positions, _ = _instances()
    packed, _, _ = _packed(rows, positions)
    row = next(r for r in packed if r["segment_ids"].max() >= 3)
    names = ("input_ids", "token_type_ids", "attention_mask", "segment_ids")
    changed = dict(row, input_ids=row["input_ids"].copy())
    second = row["segment_ids"] == 2
    changed["input_ids"][second] = (changed["input_ids"][second] + 7) % 90 + 5

    def encode(r):
        b = _stack([r], names)
        return model.apply(variables, *(b[n] for n in names[:3]), segment_ids=b["segment_ids"])[
            "sequence_output"
        ][0]

    before, after = encode(row), encode(changed)
    others = row["segment_ids"] != 2
    np.testing.assert_allclose(after[others], before[others], atol=1e-6)
    assert float(jnp.abs(after[second] - before[second]).max(-1).min()) > 1e-3  # every token


def test_segment_mask_is_block_diagonal_and_positions_restart():
    seg = jnp.array([[1, 1, 2, 2, 2, 0, 0]])
    mask = attention_mask_of(jnp.ones_like(seg), seg)[0, 0]
    want = np.array(seg[0][:, None] == seg[0][None, :])
    np.testing.assert_array_equal(mask, want)
    from zhlm.models.layers import segment_positions

    np.testing.assert_array_equal(segment_positions(seg)[0], [0, 1, 0, 1, 2, 0, 1])


def test_flash_takes_the_block_diagonal_mask():
    b, s, h, d = 2, 16, 2, 8
    keys = jax.random.split(jax.random.key(0), 4)
    q, k, v = (jax.random.normal(key, (b, s, h, d)) for key in keys[:3])
    seg = jnp.array([[1] * 5 + [2] * 7 + [0] * 4, [1] * 9 + [2] * 3 + [3] * 4])
    mask = attention_mask_of(jnp.ones_like(seg), seg)
    keep = jax.random.bernoulli(keys[3], 0.9, (b, h, s, s))
    want = attention_with_dropout(q, k, v, mask, lambda p: jnp.where(keep, p / 0.9, 0.0))
    got = flash_attention(q, k, v, mask, keep, 0.1)
    np.testing.assert_allclose(got, want, atol=2e-5)

    def grads(fn):
        return jax.grad(lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v))), argnums=(0, 1, 2))(q, k, v)

    xla = grads(
        lambda q, k, v: attention_with_dropout(
            q, k, v, mask, lambda p: jnp.where(keep, p / 0.9, 0.0)
        )
    )
    pallas = grads(lambda q, k, v: flash_attention(q, k, v, mask, keep, 0.1))
    for g, w in zip(pallas, xla, strict=True):
        np.testing.assert_allclose(g, w, atol=5e-5)


def test_packed_model_with_flash_equals_the_xla_path():
    xla = build_model(tiny("bert", max_position_embeddings=S, dropout_rate=0.0))
    flash = build_model(
        tiny("bert", max_position_embeddings=S, dropout_rate=0.0, attention_impl="flash")
    )
    variables = init_variables(xla, jax.random.key(0))
    rows, positions, _ = _instances()
    packed, masked, _ = _packed(rows, positions)
    batch = _stack(packed[:2], ("input_ids", "token_type_ids", "attention_mask", "segment_ids"))
    starts = jnp.asarray(np.stack([r["instance_starts"] for r in packed[:2]]))
    args = [batch[n] for n in ("input_ids", "token_type_ids", "attention_mask")]
    kw = dict(segment_ids=batch["segment_ids"], instance_starts=starts)
    want, got = xla.apply(variables, *args, **kw), flash.apply(variables, *args, **kw)
    real = np.asarray(batch["segment_ids"]) > 0
    for name in ("sequence_output", "sentence_logits"):
        w, g = np.asarray(want[name]), np.asarray(got[name])
        if name == "sequence_output":
            w, g = w[real], g[real]
        np.testing.assert_allclose(g, w, atol=2e-5)
