"""The train state and the one jitted pretraining step, with explicit shardings.

``train_step(state, batch, rng) -> (state, metrics)`` masks the batch on device from
``fold_in(rng, step)`` (fresh masks every step, identical on any mesh), runs the model, the
objectives and the optimizer. Model, optimizer and config are captured by closure; there are no
feature branches inside: what differs between recipes is in the config, the data fields and the
masking function. Metrics are sums and counts, fetched by the loop only at log steps.

Gradient accumulation scans over ``config.train.micro_batches`` slices of the batch inside the
step (each slice masked with its own key), averaging the slices' losses and gradients as
``optax.MultiSteps`` would, without an extra optimizer state.
"""

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from zhlm import masking, objectives
from zhlm.models import Model, build_model
from zhlm.train import optim, sharding

jax.config.update("jax_threefry_partitionable", True)  # random bits independent of sharding


@dataclasses.dataclass
class Trainer:
    """Everything built once per run: mesh, model, optimizer, shardings and the jitted step."""

    config: object
    mesh: jax.sharding.Mesh
    model: Model
    tx: optax.GradientTransformation
    schedule: Callable
    state_shardings: object
    init_fn: Callable  # rng -> sharded state
    step_fn: Callable  # (state, batch, rng) -> (state, metrics)
    eval_fn: Callable  # (params, batch, rng) -> metrics, without dropout

    def init(self, rng):
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(sharding.rules(self.config)):
            return self.init_fn(rng)

    def abstract_state(self):
        """ShapeDtypeStructs of the state with their shardings (the target of a restore)."""
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(sharding.rules(self.config)):
            shapes = jax.eval_shape(self.init_fn, jax.random.key(0))
        return jax.tree_util.tree_map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
            shapes,
            self.state_shardings,
        )

    def step(self, state, batch, rng):
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(sharding.rules(self.config)):
            return self.step_fn(state, batch, rng)

    def evaluate(self, params, batch, rng):
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(sharding.rules(self.config)):
            return self.eval_fn(params, batch, rng)


def _boxed_init(model, tx_factory, config):
    seq = config.data.max_seq_length

    def init(rng):
        ids = jnp.zeros((1, seq), jnp.int32)
        params = model.init(rng, ids, ids, ids)["params"]
        return {
            "step": jnp.zeros([], jnp.int32),
            "params": params,
            "opt_state": tx_factory(params).init(params),
        }

    return init


def _loss_fn(model, config, deterministic=False):
    def loss(params, batch, rng):
        mask_rng, dropout_rng = jax.random.split(rng)
        masked = masking.mask_batch(batch, mask_rng, config)
        span = {k: masked[k] for k in ("span_left", "span_right", "span_offset") if k in masked}
        outputs = model.apply(
            {"params": params},
            masked["input_ids"],
            masked["token_type_ids"],
            masked["attention_mask"],
            masked_positions=masked["masked_positions"],
            deterministic=deterministic,
            rngs={"dropout": dropout_rng},
            **span,
        )
        return objectives.pretraining_loss(outputs, masked)

    return loss


def _accumulated_grads(loss, params, batch, rng, micro_batches):
    """Mean loss, summed metrics and mean gradients over ``micro_batches`` slices."""
    grad_fn = jax.value_and_grad(loss, has_aux=True)
    if micro_batches == 1:
        (value, metrics), grads = grad_fn(params, batch, rng)
        return metrics, grads
    slices = jax.tree_util.tree_map(
        lambda x: x.reshape((micro_batches, x.shape[0] // micro_batches) + x.shape[1:]), batch
    )

    def body(carry, inputs):
        i, micro = inputs
        (_, metrics), grads = grad_fn(params, micro, jax.random.fold_in(rng, i))
        return jax.tree_util.tree_map(jnp.add, carry, (metrics, grads)), None

    zeros = jax.eval_shape(
        lambda: grad_fn(params, jax.tree_util.tree_map(lambda x: x[0], slices), rng)
    )
    (_, metrics0), grads0 = zeros
    carry = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), (metrics0, grads0))
    (metrics, grads), _ = jax.lax.scan(body, carry, (jnp.arange(micro_batches), slices))
    # Per-slice losses are means, so the step's loss and gradient are their average.
    grads = jax.tree_util.tree_map(lambda g: g / micro_batches, grads)
    metrics = dict(
        metrics, total_loss_sum=metrics["total_loss_sum"] / micro_batches, total_count=jnp.ones(())
    )
    return metrics, grads


def make_trainer(config, mesh=None) -> Trainer:
    """Builds the mesh, model, optimizer and the jitted init and step for ``config``."""
    mesh = sharding.create_mesh(config) if mesh is None else mesh
    model = build_model(config)
    sharding.check_divisibility(config, mesh, model.config)

    def tx_factory(params):
        return optim.make_optimizer(config.optim, config.train.num_steps, params)[0]

    boxed_init = _boxed_init(model, tx_factory, config)
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
        abstract = jax.eval_shape(boxed_init, jax.random.key(0))
    state_shardings = sharding.logical_shardings(abstract, mesh, config)
    tx, schedule = optim.make_optimizer(
        config.optim, config.train.num_steps, nn.unbox(abstract)["params"]
    )
    loss = _loss_fn(model, config)

    def train_step(state, batch, rng):
        step_rng = jax.random.fold_in(rng, state["step"])
        metrics, grads = _accumulated_grads(
            loss, state["params"], batch, step_rng, config.train.micro_batches
        )
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        metrics = dict(
            metrics,
            grad_norm=optax.tree.norm(grads),
            learning_rate=schedule(state["step"]),
            tokens=jnp.sum(batch["attention_mask"]),
        )
        return {"step": state["step"] + 1, "params": params, "opt_state": opt_state}, metrics

    eval_loss = _loss_fn(model, config, deterministic=True)

    def eval_step(params, batch, rng):
        return eval_loss(params, batch, rng)[1]

    batch_sh = sharding.batch_sharding(mesh)
    init_fn = jax.jit(lambda rng: nn.unbox(boxed_init(rng)), out_shardings=state_shardings)
    step_fn = jax.jit(
        train_step,
        in_shardings=(state_shardings, batch_sh, sharding.replicated(mesh)),
        out_shardings=(state_shardings, sharding.replicated(mesh)),
        donate_argnums=0,
    )
    eval_fn = jax.jit(
        eval_step,
        in_shardings=(state_shardings["params"], batch_sh, sharding.replicated(mesh)),
        out_shardings=sharding.replicated(mesh),
    )
    return Trainer(config, mesh, model, tx, schedule, state_shardings, init_fn, step_fn, eval_fn)
