"""``model.attention_impl="flash"``: the Pallas TPU attention kernels against the XLA path.

On CPU the kernels run in Pallas' interpret mode, so their arithmetic is checked here exactly
(float32, the same dropout keep mask on both sides); that they lower for a TPU, and move fewer
bytes than the XLA core, is checked with libtpu's compiler.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import HELPERS_PATH, batch, tiny

from zhlm.models import build_model, dropout_rngs, init_variables
from zhlm.models.flash import MAX_LENGTH, flash_attention
from zhlm.models.layers import attention_with_dropout

RATE = 0.25


def _inputs(b=2, s=16, h=3, d=8, seed=0):
    keys = jax.random.split(jax.random.key(seed), 5)
    q, k, v, w = (jax.random.normal(key, (b, s, h, d)) for key in keys[:4])
    lengths = jnp.array([s, s - 5, 0][:b] + [s] * (b - 3))  # 0: every key masked
    mask = (jnp.arange(s) < lengths[:, None])[:, None, None, :]
    keep = jax.random.bernoulli(keys[4], 1 - RATE, (b, h, s, s))
    return q, k, v, w, mask, keep


def test_flash_equals_the_xla_path_with_the_same_dropout_mask():
    q, k, v, w, mask, keep = _inputs(b=3)  # a sequence with no key to attend to, too

    def xla(q, k, v):
        return attention_with_dropout(q, k, v, mask, lambda p: jnp.where(keep, p / (1 - RATE), 0))

    def flash(q, k, v):
        return flash_attention(q, k, v, mask, keep, RATE)

    np.testing.assert_allclose(flash(q, k, v), xla(q, k, v), atol=1e-6)
    grads = [jax.grad(lambda *a, f=f: jnp.sum(f(*a) * w), argnums=(0, 1, 2)) for f in (xla, flash)]
    for want, got in zip(grads[0](q, k, v), grads[1](q, k, v), strict=True):
        np.testing.assert_allclose(got, want, atol=2e-6)
        assert float(jnp.abs(want).max()) > 0.1  # a gradient that is there


def test_flash_without_dropout_equals_dot_product_attention():
    q, k, v, w, mask, _ = _inputs(s=24, seed=1)
    want = jax.nn.dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(flash_attention(q, k, v, mask), want, atol=1e-6)
    # ... and so do its gradients (ALBERT trains without dropout: this backward pass)
    fns = (
        lambda *a: jax.nn.dot_product_attention(*a, mask=mask),
        lambda *a: flash_attention(*a, mask),
    )
    grads = [jax.grad(lambda *a, f=f: jnp.sum(f(*a) * w), argnums=(0, 1, 2)) for f in fns]
    for want, got in zip(grads[0](q, k, v), grads[1](q, k, v), strict=True):
        np.testing.assert_allclose(got, want, atol=2e-6)
        assert float(jnp.abs(want).max()) > 0.1


def test_flash_refuses_what_it_cannot_do():
    q, k, v, _, mask, keep = _inputs(s=8)
    with pytest.raises(ValueError, match="keep mask"):
        flash_attention(q, k, v, mask, None, 0.1)
    long = jax.ShapeDtypeStruct((1, MAX_LENGTH + 8, 1, 8), jnp.float32)
    with pytest.raises(ValueError, match="attention_impl='xla'"):
        jax.eval_shape(flash_attention, long, long, long, jnp.ones((1, 1, 1, MAX_LENGTH + 8), bool))
    with pytest.raises(ValueError, match="attention_impl"):
        build_model(tiny(attention_impl="splash"))


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["bert", "albert"])
def test_models_with_flash_attention_equal_the_xla_path(recipe):
    # No hidden dropout: what moves the training loss below is attention dropout alone.
    xla = build_model(tiny(recipe, dropout_rate=0.0))
    flash = build_model(tiny(recipe, dropout_rate=0.0, attention_impl="flash"))
    variables = init_variables(xla, jax.random.key(0))
    want, got = xla.apply(variables, *batch()), flash.apply(variables, *batch())
    for name in ("sequence_output", "mlm_logits"):
        np.testing.assert_allclose(got[name], want[name], atol=2e-5)

    # Training: dropout draws its own keep mask from the layer's key; a gradient comes back.
    weights = jax.random.normal(jax.random.key(9), want["sequence_output"].shape)

    def loss(params, key):
        rngs = dropout_rngs(key, flash.config)
        out = flash.apply({"params": params}, *batch(), deterministic=False, rngs=rngs)
        return jnp.sum(out["sequence_output"] * weights)

    params = variables["params"]
    value, grads = jax.value_and_grad(loss)(params, jax.random.key(1))
    assert float(loss(params, jax.random.key(1))) == pytest.approx(float(value), rel=1e-6)
    moved = abs(float(loss(params, jax.random.key(2))) - float(value)) / abs(float(value))
    # Fresh key, fresh attention masks (BERT 0.1); ALBERT has no dropout: the same loss.
    assert (moved > 1e-3) == (flash.config.attention_dropout_rate > 0), moved
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))


SHARDED_CHILD = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np
    from jax.sharding import Mesh
    import flax.linen as nn
    sys.path.insert(0, sys.argv[1])
    from helpers import batch, tiny
    from zhlm.models import build_model, dropout_rngs, init_variables

    assert len(jax.devices()) == 8
    config = tiny("bert", attention_impl="flash", num_heads=4)
    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))
    ids, types, mask = (np.concatenate([x] * 4) for x in batch())  # 8 sequences
    want = model.apply(variables, ids, types, mask)["sequence_output"]
    mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "tensor"))
    rules = (("batch", "data"), ("heads", "tensor"))
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        got = jax.jit(model.apply)(variables, ids, types, mask)["sequence_output"]
        text = jax.jit(model.apply).lower(variables, ids, types, mask).as_text()
    assert "shard_map" in text or "sdy.manual_computation" in text, text[:2000]
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)

    # Training: per-shard keep masks and gradients equal one device's (threefry's bits do
    # not depend on the sharding; the sums over shards add in another order: 6e-5 on 1).
    weights = np.random.RandomState(0).normal(size=want.shape).astype(np.float32)

    def loss(params):
        rngs = dropout_rngs(jax.random.key(3), model.config)
        out = model.apply({"params": params}, ids, types, mask, deterministic=False, rngs=rngs)
        return (out["sequence_output"] * weights).sum()

    value, grads = jax.value_and_grad(loss)(variables["params"])
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        value_sharded, grads_sharded = jax.jit(jax.value_and_grad(loss))(variables["params"])
    np.testing.assert_allclose(float(value_sharded), float(value), rtol=1e-5)
    # float32 sums of terms up to ~1e2, added in another order over 8 shards than on one device:
    # an element near 0 moves by up to ~2e-5 (seen on an AMD EPYC); a wrong shard is off by
    # the terms themselves.
    for g, want_g in zip(jax.tree.leaves(grads_sharded), jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(want_g), rtol=1e-4, atol=5e-5)
    print("ok")
    """
)


@pytest.mark.slow
def test_flash_under_a_mesh_runs_per_shard_and_equals_one_device():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run(
        [sys.executable, "-c", SHARDED_CHILD, HELPERS_PATH],
        env=env,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def _tpu_bytes(fn, shape):
    """Bytes accessed by ``fn``'s forward and backward compiled for one v5e chip."""
    from jax.sharding import Mesh

    from zhlm.train import tpu

    device = tpu.devices(tpu.one_chip(tpu.parse("v5litepod-1")))[0]
    b, s, h, _ = shape
    qkv = [jax.ShapeDtypeStruct(shape, jnp.bfloat16)] * 3
    mask = jax.ShapeDtypeStruct((b, 1, 1, s), jnp.bool_)

    def fwd_bwd(q, k, v, mask, key):
        keep = jax.random.bernoulli(key, 0.9, (b, h, s, s))
        loss = lambda q, k, v: jnp.sum(fn(q, k, v, mask, keep).astype(jnp.float32))  # noqa: E731
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    key = jax.eval_shape(lambda: jax.random.key(0))
    with jax.set_mesh(Mesh([device], ("x",))):
        compiled = jax.jit(fwd_bwd).lower(*qkv, mask, key).compile()
    cost = compiled.cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["bytes accessed"], compiled.as_text()


@pytest.mark.slow
def test_flash_lowers_for_a_tpu_and_moves_fewer_bytes_than_the_xla_core():
    pytest.importorskip("libtpu", reason="compiling for a TPU needs libtpu (the test extra)")
    shape = (2, 512, 4, 64)  # BERT-base heads are 64 wide; its longest sequences

    def xla(q, k, v, mask, keep):
        return attention_with_dropout(q, k, v, mask, lambda p: jnp.where(keep, p / 0.9, 0))

    def flash(q, k, v, mask, keep):
        return flash_attention(q, k, v, mask, keep, 0.1)

    xla_bytes, _ = _tpu_bytes(xla, shape)
    flash_bytes, hlo = _tpu_bytes(flash, shape)
    assert "tpu_custom_call" in hlo  # Mosaic kernels, not the interpreter's loops
    assert flash_bytes < 0.5 * xla_bytes, (flash_bytes, xla_bytes)  # 0.31 when written


def test_flash_lowers_for_a_tpu_at_an_odd_length_in_float32():
    """Sequences not a multiple of 128 (fine-tuning's own lengths) and float32 compute: the
    whole-block kernels still compile for the chip."""
    pytest.importorskip("libtpu", reason="compiling for a TPU needs libtpu (the test extra)")
    from jax.sharding import Mesh

    from zhlm.train import tpu

    device = tpu.devices(tpu.one_chip(tpu.parse("v5litepod-1")))[0]
    b, s, h, d = 1, 200, 2, 64
    qkv = [jax.ShapeDtypeStruct((b, s, h, d), jnp.float32)] * 3
    mask = jax.ShapeDtypeStruct((b, 1, 1, s), jnp.bool_)

    def fwd_bwd(q, k, v, mask, key):
        keep = jax.random.bernoulli(key, 0.9, (b, h, s, s))
        loss = lambda q, k, v: jnp.sum(flash_attention(q, k, v, mask, keep, 0.1))  # noqa: E731
        return jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v)

    key = jax.eval_shape(lambda: jax.random.key(0))
    with jax.set_mesh(Mesh([device], ("x",))):
        hlo = jax.jit(fwd_bwd).lower(*qkv, mask, key).compile().as_text()
    assert hlo.count("tpu_custom_call") >= 2  # forward and backward kernels
