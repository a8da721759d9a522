"""The one jitted pretraining step over a device mesh, with explicit shardings.

``train_step(state, batch, rng) -> (state, metrics)`` masks the batch on device from
``fold_in(rng, step)`` (fresh masks every step, identical on any mesh), runs the model, the
objectives and the optimizer. Model, optimizer and config are captured by closure; there are no
feature branches inside: what differs between recipes is in the config, the data fields and the
masking function. Metrics are sums and counts, fetched by the loop only at log steps.

Gradient accumulation scans over ``config.train.micro_batches`` slices of the batch inside the
step (each slice masked with its own key), averaging the slices' losses and gradients as
``optax.MultiSteps`` would, without an extra optimizer state.
"""

import contextlib
import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from zhlm import masking
from zhlm.models import Model, build_model, dropout_rngs, dummy_inputs
from zhlm.train import objectives, optim, sharding, sums
from zhlm.train import state as state_lib
from zhlm.train.state import abstract_key


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
    forward_fn: Callable | None = None  # (params, batch) -> outputs, without dropout

    def scope(self):
        """The mesh and logical-axis rules every call of a jitted function runs under."""
        return _scope(self.mesh, self.config)

    def init(self, rng):
        with self.scope():
            return self.init_fn(rng)

    def abstract_state(self):
        """ShapeDtypeStructs of the state with their shardings (the target of a restore)."""
        with self.scope():
            shapes = jax.eval_shape(self.init_fn, abstract_key())
        return jax.tree_util.tree_map(
            lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
            shapes,
            self.state_shardings,
        )

    def step(self, state, batch, rng):
        with self.scope():
            return self.step_fn(state, batch, rng)

    def evaluate(self, params, batch, rng):
        with self.scope():
            return self.eval_fn(params, batch, rng)

    def forward(self, params, batch):
        with self.scope():
            return self.forward_fn(params, batch)

    def state_from(self, params):
        """Step 0 for ``params`` on a copy placed by the state's shardings, so that the caller
        keeps ``params`` while the state is donated (fine-tuning's seeds share them)."""
        return state_lib.create_copy(params, self.tx, self.state_shardings)


@contextlib.contextmanager
def _scope(mesh, config):
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
        yield


def _loss_fn(model, config, mask_fn):
    def loss(params, batch, rng, deterministic=False):
        mask_rng, dropout_rng = jax.random.split(rng)
        masked = mask_fn(batch, mask_rng, config)
        optional = ("span_left", "span_right", "span_offset", "segment_ids", "instance_starts")
        optional_fields = {k: masked[k] for k in optional if k in masked}
        outputs = model.apply(
            {"params": params},
            masked["input_ids"],
            masked["token_type_ids"],
            masked["attention_mask"],
            masked_positions=masked["masked_positions"],
            deterministic=deterministic,
            rngs=dropout_rngs(dropout_rng, model.config),
            **optional_fields,
        )
        return objectives.pretraining_loss(outputs, masked)

    return loss


def _accumulated_grads(loss, params, batch, rng, micro_batches):
    """Metrics summed and gradients averaged over ``micro_batches`` slices of the batch."""
    grad_fn = jax.value_and_grad(loss, has_aux=True)
    if micro_batches == 1:
        (_, metrics), grads = grad_fn(params, batch, rng)
        return metrics, grads
    slices = jax.tree_util.tree_map(
        lambda x: x.reshape((micro_batches, x.shape[0] // micro_batches) + x.shape[1:]), batch
    )

    def body(carry, inputs):
        i, micro = inputs
        (_, metrics), grads = grad_fn(params, micro, jax.random.fold_in(rng, i))
        return (sums.add(carry[0], metrics), jax.tree_util.tree_map(jnp.add, carry[1], grads)), None

    first = jax.tree_util.tree_map(lambda x: x[0], slices)
    (_, metrics0), grads0 = jax.eval_shape(lambda: grad_fn(params, first, rng))
    carry = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), (metrics0, grads0))
    (metrics, grads), _ = jax.lax.scan(body, carry, (jnp.arange(micro_batches), slices))
    # Per-slice losses are means, so the step's gradient is their average (and its loss, the
    # mean of ``micro_batches`` counted slice losses, comes out of sums.means the same way).
    return metrics, jax.tree_util.tree_map(lambda g: g / micro_batches, grads)


def make_trainer(config, mesh=None, mask_fn=masking.mask_batch) -> Trainer:
    """Builds the mesh, model, optimizer and the jitted init and step for ``config``.

    ``mask_fn(batch, rng, config) -> masked batch`` is :func:`zhlm.masking.mask_batch` in
    training; a benchmark passes one that returns fixed masks to time the step without it."""
    mesh = sharding.create_mesh(config) if mesh is None else mesh
    model = build_model(config)
    return build_trainer(
        config,
        mesh,
        model,
        jax.eval_shape(lambda: dummy_inputs(config.data.max_seq_length)),
        _loss_fn(model, config, mask_fn),
        lambda params: optim.make_optimizer(config.optim, config.train.num_steps, params),
    )


def build_trainer(config, mesh, model, inputs, loss, optimizer, forward=None) -> Trainer:
    """The machinery pretraining and fine-tuning share: the divisibility checks, the abstract
    init on ``inputs`` (the model's example inputs), the shardings, the optimizer built for the
    abstract parameter tree, and the jitted init, ``train_step`` (``fold_in(rng, step)``,
    micro-batches, ``grad_norm``/``learning_rate``/``tokens``, donation of the state),
    ``eval_step`` and ``forward``.

    ``loss(params, batch, rng, deterministic=False) -> (scalar, sums)``;
    ``optimizer(params) -> (tx, schedule)`` (decay masks follow the parameter names);
    ``forward(params, batch) -> outputs`` (no dropout), or None."""
    sharding.check_divisibility(config, mesh, model.config)

    def tx_factory(params):
        return optimizer(params)[0]

    boxed_init = state_lib.boxed_init(model, inputs, tx_factory)
    abstract, state_shardings = state_lib.abstract_state(boxed_init, mesh, config)
    tx, schedule = optimizer(abstract["params"])

    def train_step(state, batch, rng):
        step_rng = jax.random.fold_in(rng, state["step"])
        metrics, grads = _accumulated_grads(
            loss, state["params"], batch, step_rng, config.train.micro_batches
        )
        metrics = dict(
            metrics,
            grad_norm=optax.tree.norm(grads),
            learning_rate=schedule(state["step"]),
            tokens=jnp.sum(batch["attention_mask"]),
        )
        return state_lib.apply_gradients(state, grads, tx), metrics

    def eval_step(params, batch, rng):
        return loss(params, batch, rng, True)[1]

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
    forward_fn = None
    if forward is not None:
        forward_fn = jax.jit(forward, in_shardings=(state_shardings["params"], batch_sh))
    return Trainer(
        config, mesh, model, tx, schedule, state_shardings, init_fn, step_fn, eval_fn, forward_fn
    )
