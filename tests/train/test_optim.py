"""Each optimizer variant against a NumPy transcription of its published update rule, and the
schedules against their formulas."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from zhlm import defaults
from zhlm.train import optim

EXCLUDE = ("bias", "layer_norm")
VARIANTS = {  # name: (optimizer, bias_correction, trust_ratio_exclude)
    "lamb_you": ("lamb", True, ()),
    "lamb_albert": ("lamb", False, EXCLUDE),
    "lamb_bert_wwm": ("lamb", False, ()),
    "adamw_bert": ("adamw", False, ()),
}


def params_and_grads(seed):
    rs = np.random.RandomState(seed)

    def tree(scale):
        return {
            "encoder": {
                "layers": {
                    "query": {"kernel": rs.randn(3, 4, 5) * scale, "bias": rs.randn(3, 5) * scale},
                    "attention_layer_norm": {"scale": 1 + rs.randn(3, 4) * scale},
                }
            },
            "embeddings": {"word_embeddings": {"embedding": rs.randn(7, 4) * scale}},
            "mlm": {"decoder": {"bias": np.zeros(7)}},  # a zero norm: trust ratio 1
        }

    return tree(1.0), [tree(0.5) for _ in range(3)]


def reference(params, grads, cfg, lrs, lamb, trust_exclude):
    """google-research/bert AdamWeightDecayOptimizer and google-research/albert
    lamb_optimizer.py, transcribed (plus bias correction for You et al.'s LAMB)."""
    flat = lambda t: {k: v for k, v in _flatten(t)}  # noqa: E731
    w = {k: v.astype(np.float64) for k, v in flat(params).items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v2 = {k: np.zeros_like(v) for k, v in w.items()}
    for t, (g_tree, lr) in enumerate(zip(grads, lrs, strict=True), start=1):
        g = flat(g_tree)
        norm = np.sqrt(sum(np.sum(x**2) for x in g.values()))
        g = {k: x * cfg.clip_norm / max(norm, cfg.clip_norm) for k, x in g.items()}
        for k in w:
            m[k] = cfg.b1 * m[k] + (1 - cfg.b1) * g[k]
            v2[k] = cfg.b2 * v2[k] + (1 - cfg.b2) * g[k] ** 2
            mh, vh = m[k], v2[k]
            if cfg.bias_correction:
                mh, vh = mh / (1 - cfg.b1**t), vh / (1 - cfg.b2**t)
            u = mh / (np.sqrt(vh) + cfg.eps)
            if not optim.matches(k, EXCLUDE):
                u = u + cfg.weight_decay * w[k]
            if lamb and not optim.matches(k, trust_exclude):
                layers = k[:2] == ("encoder", "layers")
                for i in range(w[k].shape[0]) if layers else [None]:
                    sl = (i,) if layers else Ellipsis
                    wn, un = np.linalg.norm(w[k][sl]), np.linalg.norm(u[sl])
                    u[sl] = u[sl] * (wn / un if wn > 0 and un > 0 else 1.0)
            w[k] = w[k] - lr * u
    return w


def _flatten(tree, prefix=()):
    for k, v in tree.items():
        if isinstance(v, dict):
            yield from _flatten(v, prefix + (k,))
        else:
            yield prefix + (k,), v


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_update_matches_published_formula(variant):
    name, bias_correction, trust_exclude = VARIANTS[variant]
    cfg = defaults.get_base_config().optim
    cfg.name, cfg.bias_correction, cfg.trust_ratio_exclude = name, bias_correction, trust_exclude
    cfg.warmup_steps, cfg.peak_lr, cfg.weight_decay, cfg.clip_norm = 2, 0.1, 0.01, 1.0
    params, grads = params_and_grads(0)
    tx, schedule = optim.make_optimizer(cfg, 10, params)
    p = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
    state = tx.init(p)
    for g in grads:
        updates, state = tx.update(jax.tree_util.tree_map(jnp.asarray, g), state, p)
        p = jax.tree_util.tree_map(lambda a, b: a + b, p, updates)
    lrs = [float(schedule(i)) for i in range(3)]
    assert lrs[0] == 0.0  # BERT's first update has lr 0: step 0 of the warmup
    want = reference(params, grads, cfg, lrs, name == "lamb", trust_exclude)
    for k, got in _flatten(p):
        np.testing.assert_allclose(got, want[k], rtol=2e-5, atol=1e-6, err_msg=str(k))


def test_variants_really_differ():
    """The table's variants are distinct rules, so the tests above can tell them apart."""
    params, grads = params_and_grads(1)
    results = []
    for name, bc, excl in VARIANTS.values():
        cfg = defaults.get_base_config().optim
        cfg.name, cfg.bias_correction, cfg.trust_ratio_exclude = name, bc, excl
        cfg.warmup_steps = 0
        tx, _ = optim.make_optimizer(cfg, 10, params)
        p = jax.tree_util.tree_map(jnp.asarray, params)
        u, _ = tx.update(jax.tree_util.tree_map(jnp.asarray, grads[0]), tx.init(p), p)
        results.append(np.concatenate([np.ravel(x) for _, x in _flatten(u)]))
    for i in range(len(results)):
        for j in range(i + 1, len(results)):
            assert not np.allclose(results[i], results[j]), (i, j)


def test_bert_schedule_counts_decay_from_step_zero():
    cfg = defaults.get_base_config().optim
    cfg.peak_lr, cfg.warmup_steps, cfg.schedule = 1.0, 10, "bert"
    s = optim.learning_rate_schedule(cfg, 100)
    np.testing.assert_allclose([s(0), s(5), s(10), s(50), s(100)], [0, 0.5, 0.9, 0.5, 0], atol=1e-7)


def test_linear_and_polynomial_schedules():
    cfg = defaults.get_base_config().optim
    cfg.peak_lr, cfg.warmup_steps, cfg.schedule = 1.0, 10, "linear"
    s = optim.learning_rate_schedule(cfg, 110)
    np.testing.assert_allclose([s(5), s(10), s(60), s(110)], [0.5, 1.0, 0.5, 0.0], atol=1e-7)
    cfg.schedule, cfg.power = "polynomial", 2.0
    s = optim.learning_rate_schedule(cfg, 110)
    np.testing.assert_allclose([s(10), s(60), s(110)], [1.0, 0.25, 0.0], atol=1e-7)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("name", "sgd", "lamb or adamw"),
        ("schedule", "cosine", "bert, linear"),
        ("warmup_steps", 10, "warmup_steps"),
    ],
)
def test_bad_options(key, value, match):
    cfg = defaults.get_base_config().optim
    cfg[key] = value
    with pytest.raises(ValueError, match=match):
        optim.make_optimizer(cfg, 10, {"w": jnp.ones(2)})
