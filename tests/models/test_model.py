"""The encoder and heads: shapes, sharing modes, gathering, dtypes, remat, logical axes."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import RECIPES, batch, tiny

from zhlm.models import build_model, count_params, dropout_rngs, fit_vocab, init_variables
from zhlm.models.layers import attention, attention_with_dropout


def run(config, seed=0, **kw):
    model = build_model(config)
    variables = init_variables(model, jax.random.key(seed))
    return model, variables, model.apply(variables, *batch(), **kw)


@pytest.mark.parametrize("recipe", RECIPES)
def test_output_contract(recipe):
    _, _, out = run(tiny(recipe), masked_positions=jnp.array([[1, 2, 3], [4, 5, 0]]))
    assert out["sequence_output"].shape == (2, 12, 128)
    assert out["pooled_output"].shape == (2, 128)
    assert out["mlm_logits"].shape == (2, 3, 97) and out["mlm_logits"].dtype == jnp.float32
    assert ("sentence_logits" in out) == (recipe not in ("roberta_wwm", "spanbert"))


def test_gathered_logits_equal_full_logits():
    model, variables, full = run(tiny())
    pos = jnp.array([[0, 3, 7], [11, 2, 2]])
    picked = model.apply(variables, *batch(), masked_positions=pos)["mlm_logits"]
    want = jnp.take_along_axis(full["mlm_logits"], pos[..., None], axis=1)
    np.testing.assert_allclose(picked, want, atol=1e-5)


def layer_sets(variables):
    layers = variables["params"]["encoder"]["layers"]
    return layers["query"]["kernel"].shape[0], layers["intermediate"]["kernel"].shape[0]


@pytest.mark.parametrize(
    "share,groups,inner,want",
    [
        ("none", 1, 1, (2, 2)),
        ("all", 1, 1, (1, 1)),
        ("attention", 1, 1, (1, 2)),
        ("ffn", 1, 1, (2, 1)),
        ("all", 2, 1, (2, 2)),
        ("all", 1, 2, (2, 2)),
    ],
)
def test_sharing_modes_set_counts(share, groups, inner, want):
    config = tiny(share_layers=share, num_groups=groups, inner_group_num=inner)
    _, variables, out = run(config)
    assert layer_sets(variables) == want
    assert np.isfinite(out["sequence_output"]).all()


def test_shared_stack_equals_one_layer_applied_repeatedly():
    """ALBERT's 'all' sharing: L applications of one parameter set, checked against running a
    1-layer model L times by hand."""
    config = tiny("albert", num_layers=3)
    model, variables, out = run(config)
    one = build_model(tiny("albert", num_layers=1))
    ids, types, mask = batch()
    x = one.apply(variables, ids, types, True, method=lambda m, i, t, d: m.embeddings(i, t, d))
    for _ in range(3):
        x = one.apply(variables, x, mask, method=lambda m, h, a: m.encoder(h, a))
    np.testing.assert_allclose(out["sequence_output"], x, atol=1e-5)


def test_albert_group_index_matches_hf_formula():
    cfg = build_model(tiny("albert", num_layers=5, num_groups=2, inner_group_num=2)).config
    got = [cfg.set_index("attention", j) for j in range(cfg.applications)]
    want = [int(i / (5 / 2)) * 2 + k for i in range(5) for k in range(2)]  # HF AlbertTransformer
    assert got == want


def test_dropout_is_active_only_when_not_deterministic():
    model, variables, det = run(tiny())
    rngs = {"dropout": jax.random.key(1)}
    a = model.apply(variables, *batch(), deterministic=False, rngs=rngs)["sequence_output"]
    b = model.apply(variables, *batch(), deterministic=False, rngs={"dropout": jax.random.key(2)})
    assert not np.allclose(a, det["sequence_output"])
    assert not np.allclose(a, b["sequence_output"])


def test_unfused_attention_path_equals_fused():
    rs = np.random.RandomState(0)
    q, k, v = (jnp.asarray(rs.randn(2, 5, 3, 4), jnp.float32) for _ in range(3))
    mask = jnp.asarray(rs.rand(2, 1, 1, 5) > 0.3).at[..., 0].set(True)
    fused = attention(q, k, v, mask, nn.Dropout(0.0), deterministic=True)
    np.testing.assert_allclose(attention_with_dropout(q, k, v, mask, lambda p: p), fused, atol=1e-6)


def test_bfloat16_compute_keeps_float32_params():
    _, v32, out32 = run(tiny())
    config = tiny(dtype="bfloat16")
    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))
    assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(variables))
    out = model.apply(variables, *batch())
    assert out["sequence_output"].dtype == jnp.bfloat16
    np.testing.assert_allclose(out["mlm_logits"], out32["mlm_logits"], atol=0.15)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["full", "dots"])
def test_remat_changes_nothing_numerically(policy):
    ids, types, mask = batch()

    def loss(config):
        model = build_model(config)
        variables = init_variables(model, jax.random.key(0))
        f = lambda v: model.apply(v, ids, types, mask)["mlm_logits"].mean()  # noqa: E731
        return jax.value_and_grad(f)(variables)

    (l0, g0), (l1, g1) = loss(tiny()), loss(tiny(remat=policy))
    np.testing.assert_allclose(l0, l1, rtol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(g0), jax.tree_util.tree_leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("recipe", ["bert", "albert", "spanbert"])
def test_every_parameter_has_logical_axes(recipe):
    model = build_model(tiny(recipe))
    ids = jnp.zeros((1, 8), jnp.int32)
    boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, ids))["params"]
    leaves = jax.tree_util.tree_leaves(boxed, is_leaf=lambda x: isinstance(x, nn.Partitioned))
    allowed = {"vocab", "embed", "mlp", "heads", "kv", "layers", "factor", "norm"}
    for leaf in leaves:
        assert isinstance(leaf, nn.LogicallyPartitioned), leaf
        assert len(leaf.names) == leaf.value.ndim and set(leaf.names) <= allowed


def test_span_boundary_head():
    config = tiny("spanbert")
    left, right = jnp.array([[1, 1, 0], [3, 3, 0]]), jnp.array([[4, 4, 0], [6, 6, 0]])
    offset = jnp.array([[0, 1, 0], [0, 1, 0]])
    _, _, out = run(
        config,
        masked_positions=jnp.array([[2, 3, 0], [4, 5, 0]]),
        span_left=left,
        span_right=right,
        span_offset=offset,
    )
    assert out["sbo_logits"].shape == (2, 3, 97)


def test_sequence_longer_than_position_table_is_an_error():
    model = build_model(tiny())
    variables = init_variables(model, jax.random.key(0))
    ids = jnp.ones((1, 40), jnp.int32)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.apply(variables, ids, ids * 0, ids)


def test_vocabulary_is_padded_inside_the_model_only():
    """Rows padded to vocab_multiple; logits, counts and the real rows keep vocab_size (97)."""
    config = tiny("spanbert", vocab_multiple=128)
    model, variables, out = run(config)
    params = variables["params"]
    assert params["embeddings"]["word_embeddings"]["embedding"].shape[0] == 128
    assert params["mlm"]["decoder"]["bias"].shape == (128,)
    assert params["sbo"]["decoder"]["bias"].shape == (128,)
    assert out["mlm_logits"].shape[-1] == 97
    unpadded = tiny("spanbert", vocab_multiple=1)
    assert count_params(model) == count_params(build_model(unpadded))
    # The same real rows give the same logits whatever the padding holds.
    fitted = fit_vocab(variables["params"], build_model(unpadded).config)
    assert fitted["embeddings"]["word_embeddings"]["embedding"].shape[0] == 97
    out1 = build_model(unpadded).apply({"params": fitted}, *batch())
    np.testing.assert_allclose(out1["mlm_logits"], out["mlm_logits"], rtol=1e-6, atol=1e-6)
    noisy = fit_vocab(fitted, model.config)  # zero padding rows instead of the initialiser's
    np.testing.assert_array_equal(noisy["mlm"]["decoder"]["bias"][97:], 0)
    out2 = model.apply({"params": noisy}, *batch())
    np.testing.assert_allclose(out2["mlm_logits"], out["mlm_logits"], rtol=1e-6, atol=1e-6)


def test_saved_configs_without_vocab_multiple_keep_their_unpadded_tables():
    from zhlm import defaults

    saved = tiny().to_dict()
    del saved["model"]["vocab_multiple"]
    assert defaults.config_from_dict(saved).model.vocab_multiple == 1
    assert defaults.config_from_dict(tiny().to_dict()).model.vocab_multiple == 128


def test_dropout_rng_rbg_is_fresh_per_key_and_reproducible():
    config = tiny(dropout_rng="rbg")
    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))

    def seq(seed):
        rngs = dropout_rngs(jax.random.key(seed), model.config)
        return model.apply(variables, *batch(), deterministic=False, rngs=rngs)["sequence_output"]

    np.testing.assert_array_equal(seq(1), seq(1))
    assert not np.allclose(seq(1), seq(2))
    threefry = dropout_rngs(jax.random.key(1), build_model(tiny()).config)
    out = model.apply(variables, *batch(), deterministic=False, rngs=threefry)["sequence_output"]
    assert not np.allclose(out, seq(1))  # a different generator, not a renamed one
    with pytest.raises(ValueError, match="dropout_rng"):
        build_model(tiny(dropout_rng="philox"))
