"""Losses and metrics of zhlm.train.objectives against a direct numpy computation, plus one tiny
end-to-end pass (real text -> mask_batch -> model -> pretraining_loss -> gradients).

Why the numpy reference: the losses are the training signal of every recipe; an error in the
weighting (padding slots counted, mean over sequences instead of targets) would train silently.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import realtext
from helpers import ROOT

from zhlm import defaults, masking
from zhlm.train import objectives, sums


def _nll(logits, labels):
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, labels[..., None], -1)[..., 0]


def _fake(rng, b=4, p=6, v=11):
    logits = rng.normal(size=(b, p, v)).astype(np.float32)
    labels = rng.integers(v, size=(b, p)).astype(np.int32)
    weights = (rng.random((b, p)) < 0.7).astype(np.float32)
    weights[0] = 0  # a sequence without targets weighs nothing
    return logits, labels, weights


def test_mlm_loss_is_weighted_mean_over_targets():
    rng = np.random.default_rng(0)
    logits, labels, weights = _fake(rng)
    logits[1, 0, labels[1, 0]] += 10  # at least one certain hit
    weights[1, 0] = 1
    loss, m = objectives.mlm_loss(
        {"mlm_logits": jnp.asarray(logits)},
        {"masked_ids": jnp.asarray(labels), "masked_weights": jnp.asarray(weights)},
    )
    want = (_nll(logits, labels) * weights).sum() / weights.sum()
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(m["mlm_loss_sum"] / m["mlm_count"], want, rtol=1e-5)
    hits = ((logits.argmax(-1) == labels) * weights).sum()
    assert m["mlm_correct"] == hits and m["mlm_count"] == weights.sum()


def test_pretraining_loss_adds_the_heads_present():
    rng = np.random.default_rng(1)
    logits, labels, weights = _fake(rng)
    sbo = rng.normal(size=logits.shape).astype(np.float32)
    sent = rng.normal(size=(4, 2)).astype(np.float32)
    sent_labels = np.array([0, 1, 1, 0], np.int32)
    batch = {
        "masked_ids": jnp.asarray(labels),
        "masked_weights": jnp.asarray(weights),
        "sentence_label": jnp.asarray(sent_labels),
    }
    mlm = (_nll(logits, labels) * weights).sum() / weights.sum()
    sbo_want = (_nll(sbo, labels) * weights).sum() / weights.sum()
    sent_want = _nll(sent[:, None], sent_labels[:, None]).mean()
    only_mlm, m = objectives.pretraining_loss({"mlm_logits": logits}, batch)
    np.testing.assert_allclose(only_mlm, mlm, rtol=1e-5)
    assert "sentence_count" not in m and "sbo_count" not in m
    outputs = {"mlm_logits": logits, "sentence_logits": sent, "sbo_logits": sbo}
    total, m = jax.jit(objectives.pretraining_loss)(outputs, batch)
    np.testing.assert_allclose(total, mlm + sbo_want + sent_want, rtol=1e-5)
    assert m["sentence_count"] == 4
    assert m["sentence_correct"] == (sent.argmax(-1) == sent_labels).sum()
    # Metrics are sums and counts: adding two steps and summarising gives the pooled means.
    two = jax.tree.map(lambda a: 2 * a, m)
    s = sums.means(two)
    np.testing.assert_allclose(s["mlm_loss"], mlm, rtol=1e-5)
    np.testing.assert_allclose(s["sbo_loss"], sbo_want, rtol=1e-5)
    np.testing.assert_allclose(s["loss"], float(total), rtol=1e-5)
    assert 0 <= s["mlm_accuracy"] <= 1 and 0 <= s["sentence_accuracy"] <= 1


def test_bfloat16_logits_are_scored_in_float32():
    rng = np.random.default_rng(2)
    logits, labels, weights = _fake(rng, v=21128)
    batch = {"masked_ids": jnp.asarray(labels), "masked_weights": jnp.asarray(weights)}
    f32, _ = objectives.mlm_loss({"mlm_logits": jnp.asarray(logits)}, batch)
    bf16, _ = objectives.mlm_loss({"mlm_logits": jnp.asarray(logits, jnp.bfloat16)}, batch)
    np.testing.assert_allclose(bf16, f32, rtol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["spanbert"])  # the recipe with the most fields to wire
def test_end_to_end_tiny_model_on_real_text(recipe):
    import importlib.util
    import os

    from zhlm.models import build_model

    path = os.path.join(ROOT, "configs", f"{recipe}.py")
    spec = importlib.util.spec_from_file_location(recipe, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config("tiny")
    assert isinstance(config, type(defaults.get_base_config()))
    batch = {k: jnp.asarray(v[:8]) for k, v in realtext.cached("peoples_daily", 128).items()}
    model = build_model(config)
    ids = batch["input_ids"]
    variables = model.init(jax.random.key(0), ids, batch["token_type_ids"], batch["attention_mask"])

    def loss_fn(params, rng):
        m = masking.mask_batch(batch, jax.random.fold_in(rng, 0), config)
        span = {k: m[k] for k in ("span_left", "span_right", "span_offset") if k in m}
        outputs = model.apply(
            {**variables, "params": params},
            m["input_ids"],
            m["token_type_ids"],
            m["attention_mask"],
            masked_positions=m["masked_positions"],
            deterministic=False,
            rngs={"dropout": jax.random.fold_in(rng, 1)},
            **span,
        )
        return objectives.pretraining_loss(outputs, m)

    (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(
        variables["params"], jax.random.key(1)
    )
    assert np.isfinite(float(loss))
    # Random init predicts ~uniformly: the MLM loss starts near log(V).
    assert abs(float(metrics["mlm_loss_sum"] / metrics["mlm_count"]) - np.log(21128)) < 1.0
    assert ("sbo_count" in metrics) == (recipe == "spanbert")
    assert ("sentence_count" in metrics) == (recipe == "macbert")
    leaves = jax.tree.leaves(grads)
    assert all(np.isfinite(np.asarray(g)).all() for g in leaves)
