"""The train state, one layout for pretraining and fine-tuning: ``{"step", "params", "opt_state"}``.

A plain dict (not a ``flax.struct`` class) because orbax saves and restores it as it is, the
shardings tree mirrors it leaf for leaf, and ``jax.eval_shape`` of :func:`create` is the target
of a restore. Both train steps end in :func:`apply_gradients`, so the optimizer is applied one
way everywhere.
"""

from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from zhlm.train import sharding


def create(params, tx: optax.GradientTransformation) -> dict:
    """Step 0: ``params`` and the optimizer's fresh state for them. Call it under ``jax.jit``
    when the state will be donated: eagerly, leaves may share buffers (Adam's zero moments, or
    parameters aliasing the tree they came from), and a donated buffer must be its own."""
    return {"step": jnp.zeros([], jnp.int32), "params": params, "opt_state": tx.init(params)}


def create_copy(params, tx: optax.GradientTransformation, shardings=None) -> dict:
    """:func:`create` on a jitted copy of ``params``, placed by ``shardings``: every leaf a
    buffer of its own, so the state can be donated while the caller keeps ``params``
    (fine-tuning's seeds share them)."""
    copy = jax.jit(
        lambda p: create(jax.tree_util.tree_map(jnp.copy, p), tx), out_shardings=shardings
    )
    return copy(params)


def boxed_init(model: nn.Module, inputs: tuple, tx_factory: Callable) -> Callable:
    """``rng -> state`` whose parameters (and so optimizer slots) keep their logical-axis boxes:
    traced abstractly, it is what :func:`abstract_state` reads. ``inputs``: the model's example
    inputs, arrays or ShapeDtypeStructs (zeros of their shapes are built inside the trace, so
    nothing concrete exists before it); ``tx_factory(params)`` builds the optimizer for that
    tree (decay masks follow the parameter names)."""

    def init(rng):
        params = model.init(rng, *(jnp.zeros(x.shape, x.dtype) for x in inputs))["params"]
        return create(params, tx_factory(params))

    return init


def abstract_state(init: Callable, mesh, config):
    """``(abstract unboxed state, its NamedShardings)`` for a :func:`boxed_init` on ``mesh``;
    nothing concrete is built (the mesh's devices may be a TPU topology seen from a CPU)."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
        abstract = jax.eval_shape(init, abstract_key())
    return nn.unbox(abstract), sharding.logical_shardings(abstract, mesh, config)


def abstract_key():
    """A PRNG key's shape and dtype: nothing concrete may be built for a mesh whose devices
    are absent (a TPU topology compiled on a CPU host)."""
    return jax.eval_shape(jax.random.key, 0)


def apply_gradients(state: dict, grads, tx: optax.GradientTransformation) -> dict:
    """One optimizer update: the next step's state."""
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    params = optax.apply_updates(state["params"], updates)
    return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}
