"""Optimizers and learning-rate schedules as optax chains, faithful to the published recipes.

Three published LAMB variants and BERT's AdamW are combinations of three options rather than
separate code:

| variant                       | name  | bias_correction | decay_exclude    | trust_ratio_exclude |
|-------------------------------|-------|-----------------|------------------|---------------------|
| LAMB (You et al., optax.lamb) | lamb  | True            | bias, layer_norm | ()                  |
| ALBERT's lamb_optimizer.py    | lamb  | False           | bias, layer_norm | bias, layer_norm    |
| BERT-wwm (trust ratio on all) | lamb  | False           | bias, layer_norm | ()                  |
| BERT AdamWeightDecayOptimizer | adamw | False           | bias, layer_norm | (no trust ratio)    |

The trust ratio is computed per *layer* tensor: the encoder stores its layers stacked on a
leading axis (models/layers.py), and a norm over the whole stack would be a different
optimizer from the one the papers ran.
"""

from typing import NamedTuple

import flax.traverse_util as traverse
import jax
import jax.numpy as jnp
import ml_collections
import optax

from zhlm.errors import UserError

STACKED_PREFIX = ("encoder", "layers")  # parameters with one set per layer on axis 0


def _path_mask(params, predicate):
    flat = traverse.flatten_dict(params)
    return traverse.unflatten_dict({k: predicate(k) for k in flat})


def matches(path, names) -> bool:
    """True if a parameter path's leaf is named, or lies in a module whose name contains, one of
    ``names`` ('bias' matches every bias; 'layer_norm' every LayerNorm scale and bias)."""
    return any(path[-1] == n or any(n in part for part in path[:-1]) for n in names)


class AdamState(NamedTuple):
    count: jax.Array
    mu: optax.Updates
    nu: optax.Updates


def scale_by_adam(b1, b2, eps, bias_correction: bool) -> optax.GradientTransformation:
    """Adam's direction m / (sqrt(v) + eps), with or without bias correction (BERT and ALBERT
    ran without it; optax's own ``scale_by_adam`` always corrects)."""

    def init(params):
        # Two trees, not one used twice: a donated state must not alias its own buffers.
        def zeros():
            return jax.tree_util.tree_map(jnp.zeros_like, params)

        return AdamState(jnp.zeros([], jnp.int32), zeros(), zeros())

    def update(updates, state, params=None):
        del params
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, state.nu, updates)
        count = state.count + 1
        if bias_correction:
            c1, c2 = 1 - b1 ** count.astype(jnp.float32), 1 - b2 ** count.astype(jnp.float32)
        else:
            c1 = c2 = 1.0
        out = jax.tree_util.tree_map(lambda m, v: (m / c1) / (jnp.sqrt(v / c2) + eps), mu, nu)
        return out, AdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


def scale_by_layerwise_trust_ratio(exclude) -> optax.GradientTransformation:
    """LAMB's ||w|| / ||u||, per layer for stacked parameters, 1 where either norm is zero and
    for parameters matching ``exclude``."""

    def update(updates, state, params):
        flat_u = traverse.flatten_dict(updates)
        flat_p = traverse.flatten_dict(params)
        out = {}
        for path, u in flat_u.items():
            if matches(path, exclude):
                out[path] = u
                continue
            w = flat_p[path]
            axes = tuple(range(1, u.ndim)) if path[:2] == STACKED_PREFIX else None
            w_norm = jnp.sqrt(jnp.sum(jnp.square(w), axis=axes, keepdims=True))
            u_norm = jnp.sqrt(jnp.sum(jnp.square(u), axis=axes, keepdims=True))
            ratio = jnp.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            out[path] = u * ratio
        return traverse.unflatten_dict(out), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def learning_rate_schedule(optim: ml_collections.ConfigDict, num_steps: int):
    """The learning rate at each step.

    bert: linear warmup to peak, then ``peak * (1 - t / T)`` with ``t`` counted from step 0
    (google-research/bert optimization.py: the decay does not restart after warmup);
    linear: warmup, then linear from peak at the end of warmup to 0 at T;
    polynomial: warmup, then ``peak * (1 - (t - w) / (T - w)) ** power``.
    """
    peak, warmup = optim.peak_lr, optim.warmup_steps
    if optim.schedule not in ("bert", "linear", "polynomial"):
        raise UserError(f"config.optim.schedule={optim.schedule!r}: bert, linear or polynomial")
    if not 0 <= warmup < num_steps:
        raise UserError(
            f"optim.warmup_steps={warmup} must be in [0, num_steps={num_steps}): set "
            "--config.optim.warmup_steps with a shorter train.num_steps (tiny and mini recipes "
            "take theirs from zhlm.defaults.local_warmup of their own 600 steps)"
        )
    power = optim.power if optim.schedule == "polynomial" else 1.0

    def schedule(step):
        t = jnp.asarray(step, jnp.float32)
        warm = peak * t / max(warmup, 1)
        if optim.schedule == "bert":
            decayed = peak * jnp.maximum(1 - t / num_steps, 0.0)
        else:
            frac = jnp.clip((t - warmup) / (num_steps - warmup), 0.0, 1.0)
            decayed = peak * (1 - frac) ** power
        return jnp.where(t < warmup, warm, decayed)

    return schedule


def make_optimizer(optim: ml_collections.ConfigDict, num_steps: int, params):
    """``(optax chain, schedule)`` for ``config.optim`` (see the module docstring)."""
    if optim.name not in ("lamb", "adamw"):
        raise UserError(f"config.optim.name={optim.name!r}: lamb or adamw")
    schedule = learning_rate_schedule(optim, num_steps)
    decay_mask = _path_mask(params, lambda p: not matches(p, optim.decay_exclude))
    parts = []
    if optim.clip_norm > 0:
        parts.append(optax.clip_by_global_norm(optim.clip_norm))
    parts += [
        scale_by_adam(optim.b1, optim.b2, optim.eps, optim.bias_correction),
        optax.add_decayed_weights(optim.weight_decay, decay_mask),
    ]
    if optim.name == "lamb":
        parts.append(scale_by_layerwise_trust_ratio(tuple(optim.trust_ratio_exclude)))
    parts.append(optax.scale_by_learning_rate(schedule))
    return optax.chain(*parts), schedule
