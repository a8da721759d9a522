"""``compile_plan(config, topology)``: the pretraining step compiled for a Cloud TPU slice, on
any machine, and what it says about memory, FLOPs, time and communication per chip.

Why: renting a pod to find out that a program does not fit, or spends its time resharding, is
the expensive way. The step compiled here is the one ``zhlm-pretrain`` runs: the same
``make_trainer`` (model, masking, optimizer, micro-batches, dtype, remat) on the same mesh and
logical rules, over libtpu's compile-only devices of the slice (``zhlm.train.tpu``), with
abstract inputs only (those devices hold no data).

How far to trust each number:
- Memory comes from XLA's buffer assignment for that chip (``memory_analysis()``): exact for
  this program, less what the runtime reserves (a few hundred MB), so "fits" keeps 5% spare.
- FLOPs: ``cost_analysis()`` counts a loop body once. The layer stack is one scanned loop,
  the micro-batches another, and on a sharded mesh XLA also turns matmuls with FSDP-gathered
  weights into loops (collective matmul: a ring of collective-permutes, a partial matmul per
  step). So the FLOPs come from one chip's share compiled for a single chip (its per-chip
  micro-batch, no collectives, no such loops), with one layer application (forward and
  backward, the same remat) compiled alone and added for the other applications:
  ``m * (step + (applications - 1) * layer) / tensor``; the optimizer, counted m times
  instead of once, is under 0.1% of a step. These are the FLOPs the chip executes, remat
  recomputation included; ``model_flops`` is zhlm's MFU formula
  (``metrics.train_flops_per_sequence``).
- Time is a roofline bound, not a prediction: the chip at its bf16 peak or its HBM bandwidth
  (``bytes accessed``, scaled as the FLOPs are), or ICI carrying the collectives' bytes,
  whichever takes longest, with everything else overlapped. XLA's bytes accessed counts the
  operands and results of every op, also those kept in on-chip memory, so the HBM term is
  pessimistic; ``mfu_without_hbm`` is the other end of the range. Not checked on a TPU.
"""

import dataclasses
import math
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from zhlm.train import hlo_stats, metrics, sharding, tpu
from zhlm.train.step import abstract_key, make_trainer

HEADROOM = 0.95  # share of HBM a plan may use: the runtime keeps some for itself


class DoesNotFit(ValueError):
    """The step cannot fit the chip's HBM; the message has the numbers."""


def abstract_batch(config, mesh, batch_size=None) -> dict:
    """The fields the loader gives this recipe, as sharded ShapeDtypeStructs."""
    b, s = batch_size or config.train.batch_size, config.data.max_seq_length
    spec = sharding.batch_sharding(mesh)
    names = ("input_ids", "token_type_ids", "attention_mask", "word_ids") + tuple(
        config.data.fields
    )
    batch = {k: jax.ShapeDtypeStruct((b, s), jnp.int32, sharding=spec) for k in names}
    if config.model.sentence_head != "none":
        batch["sentence_label"] = jax.ShapeDtypeStruct((b,), jnp.int32, sharding=spec)
    return batch


def per_chip_bytes(tree) -> int:
    """Bytes one chip holds of a tree of sharded ShapeDtypeStructs (its largest shard)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize for x in leaves
    )


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def _layer_cost(trainer, batch_size) -> dict:
    """cost_analysis of one layer application's forward and backward on the trainer's mesh."""
    from zhlm.models.encoder import REMAT_POLICIES
    from zhlm.models.layers import TransformerLayer

    cfg, mesh, config = trainer.model.config, trainer.mesh, trainer.config
    layer = TransformerLayer
    if cfg.remat != "none":  # prevent_cse: alone, XLA would merge the recompute away
        layer = nn.remat(layer, policy=REMAT_POLICIES[cfg.remat], prevent_cse=True)
    layer = layer(cfg, False)
    s, h = config.data.max_seq_length, cfg.hidden_size
    batch_sh = sharding.batch_sharding(mesh)
    x = jax.ShapeDtypeStruct((batch_size, s, h), cfg.dtype, sharding=batch_sh)
    mask = jax.ShapeDtypeStruct((batch_size, 1, 1, s), jnp.bool_, sharding=batch_sh)
    key = abstract_key()

    def init(rng, x, mask):
        return layer.init({"params": rng, "dropout": rng}, x, jnp.int32(0), mask)["params"]

    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.rules(config)):
        boxed = jax.eval_shape(init, key, x, mask)
        shapes = jax.eval_shape(lambda *a: nn.unbox(init(*a)), key, x, mask)
        params = jax.tree_util.tree_map(
            lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
            shapes,
            sharding.logical_shardings(boxed, mesh, config),
        )

        def fwd_bwd(p, x, mask, rng):
            def f(p, x):
                y, _ = layer.apply({"params": p}, x, jnp.int32(0), mask, rngs={"dropout": rng})
                return jnp.sum(y.astype(jnp.float32))

            return jax.grad(f, argnums=(0, 1))(p, x)

        compiled = jax.jit(fwd_bwd).lower(params, x, mask, key).compile()
    return compiled.cost_analysis()


def _compile_step(trainer, state, batch):
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(sharding.rules(trainer.config)):
        t = time.perf_counter()
        compiled = trainer.step_fn.lower(state, batch, abstract_key()).compile()
    return compiled, time.perf_counter() - t


def _memory(compiled, state_bytes, batch_bytes, hbm) -> dict:
    m = compiled.memory_analysis()
    total = (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
        + m.generated_code_size_in_bytes
    )
    return dict(
        state_bytes=state_bytes,  # parameters + optimizer state (+ step), this chip's shards
        batch_bytes=batch_bytes,
        argument_bytes=m.argument_size_in_bytes,
        output_bytes=m.output_size_in_bytes,
        alias_bytes=m.alias_size_in_bytes,  # outputs written over donated inputs (the state)
        temp_bytes=m.temp_size_in_bytes,
        code_bytes=m.generated_code_size_in_bytes,
        total_bytes=total,
        hbm_bytes=hbm,
        fits=total <= HEADROOM * hbm,
    )


def _one_chip(config, s, mesh):
    """The trainer of one chip's share: the per-chip micro-batch on a one-chip mesh."""
    c = config.copy_and_resolve_references()
    data = mesh.shape["data"] * mesh.shape["fsdp"]
    c.train.batch_size = config.train.batch_size // config.train.micro_batches // data
    c.train.micro_batches = 1
    c.train.mesh = (("data", 1), ("fsdp", 1), ("tensor", 1))
    return make_trainer(c, sharding.create_mesh(c, tpu.devices(tpu.one_chip(s))))


def _flops(config, s, mesh, model_config) -> dict:
    one = _one_chip(config, s, mesh)
    compiled, _ = _compile_step(one, one.abstract_state(), abstract_batch(one.config, one.mesh))
    step = compiled.cost_analysis()
    layer = _layer_cost(one, one.config.train.batch_size)
    apps, m, tensor = model_config.applications, config.train.micro_batches, mesh.shape["tensor"]
    # Only a loop XLA kept is undercounted; one it unrolled is counted in full already.
    missing = apps - 1 if apps in hlo_stats.trip_counts(compiled.as_text()) else 0
    per_seq = metrics.train_flops_per_sequence(
        model_config, config.data.max_seq_length, config.masking.max_predictions_per_seq
    )

    def scaled(key):  # the tensor axis splits what the one-chip program computes whole
        return m * (step.get(key, 0.0) + missing * layer.get(key, 0.0)) / tensor

    return dict(
        flops=scaled("flops"),  # per chip per step, as compiled (remat recompute included)
        bytes_accessed=scaled("bytes accessed"),
        model_flops=per_seq * config.train.batch_size / s.num_chips,  # zhlm's MFU count
        step_cost_analysis_flops=step.get("flops", 0.0),  # one chip's step, loops counted once
        layer_flops=layer.get("flops", 0.0),
        applications=apps,
    )


def _timing(config, chip, flops, comm_bytes) -> dict:
    t_compute = flops["flops"] / chip.peak_flops
    t_hbm = flops["bytes_accessed"] / chip.hbm_bandwidth
    t_ici = comm_bytes / chip.ici_bandwidth if chip.ici_bandwidth else 0.0
    t = max(t_compute, t_hbm, t_ici)
    batch, seq = config.train.batch_size, config.data.max_seq_length
    return dict(
        compute_seconds=t_compute,
        hbm_seconds=t_hbm,
        ici_seconds=t_ici if chip.ici_bandwidth else None,  # no ICI figure on the v4 page
        bound="compute" if t == t_compute else "hbm" if t == t_hbm else "ici",
        step_seconds=t,
        sequences_per_second=batch / t,
        tokens_per_second=batch * seq / t,
        mfu=flops["model_flops"] / (t * chip.peak_flops),
        # Without the HBM term (XLA's bytes accessed counts every op's operands and results,
        # also those that never leave on-chip memory): the optimistic end of the range.
        mfu_without_hbm=flops["model_flops"] / (max(t_compute, t_ici) * chip.peak_flops),
    )


def build(config, topology: str, num_slices: int = 1):
    """``(slice, trainer, state, batch)``: the trainer ``zhlm-pretrain`` would build, on the
    slice's compile-only devices, with its abstract state and batch. Compiles nothing."""
    s = tpu.parse(topology, num_slices)
    mesh = sharding.create_mesh(config, tpu.devices(s))
    trainer = make_trainer(config, mesh)
    return s, trainer, trainer.abstract_state(), abstract_batch(config, mesh)


def compile_plan(config, topology: str, num_slices: int = 1) -> dict:
    """Compiles ``config``'s pretraining step for ``topology`` (a Cloud TPU accelerator type,
    e.g. ``v5litepod-16``) and returns the plan as a dict of plain values.

    Raises :class:`DoesNotFit` before compiling when this chip's share of the state and batch
    alone exceeds its HBM; otherwise ``plan['memory']['fits']`` says whether it fits."""
    s, trainer, state, batch = build(config, topology, num_slices)
    mesh = trainer.mesh
    state_bytes, batch_bytes = per_chip_bytes(state), per_chip_bytes(batch)
    if state_bytes + batch_bytes > HEADROOM * s.chip.hbm_bytes:
        raise DoesNotFit(
            f"{topology}: parameters + optimizer state {_gb(state_bytes)} and batch "
            f"{_gb(batch_bytes)} per chip exceed {HEADROOM:.0%} of {_gb(s.chip.hbm_bytes)} "
            f"HBM before any activation (mesh {dict(mesh.shape)}); shard wider "
            "(config.train.mesh fsdp) or take a chip with more HBM"
        )
    compiled, seconds = _compile_step(trainer, state, batch)
    slice_of = [d.slice_index if num_slices > 1 else 0 for d in mesh.devices.flat]
    hlo = compiled.as_text()
    comms = hlo_stats.collectives(hlo, slice_of)
    flops = _flops(config, s, mesh, trainer.model.config)
    comm_bytes = sum(c["bytes"] - c["cross_slice_bytes"] for c in comms.values())
    return dict(
        topology=topology,
        topology_name=s.topology_name,
        num_slices=num_slices,
        chips=s.num_chips,
        chip=dataclasses.asdict(s.chip),
        mesh=dict(mesh.shape),
        recipe=config.recipe,
        size=config.model.size,
        batch_size=config.train.batch_size,
        micro_batches=config.train.micro_batches,
        seq_len=config.data.max_seq_length,
        dtype=config.model.dtype,
        remat=config.model.remat,
        compile_seconds=seconds,
        memory=_memory(compiled, state_bytes, batch_bytes, s.chip.hbm_bytes),
        flops=flops,
        time=_timing(config, s.chip, flops, comm_bytes),
        collectives=comms,
    )


def _with_batch(config, batch_size, micro_batches):
    c = config.copy_and_resolve_references()
    c.train.batch_size, c.train.micro_batches = batch_size, micro_batches
    return c


def _fits(config, topology, num_slices):
    try:
        return compile_plan(config, topology, num_slices)
    except DoesNotFit:
        return None


def find_batch(config, topology: str, num_slices: int = 1, limit: int = 4096) -> dict:
    """The largest per-chip micro-batch that fits (doubling, then bisecting, each candidate
    compiled), and the ``micro_batches`` that reach ``config.train.batch_size`` with it.

    Returns ``per_chip``, ``micro_batches`` and ``plan``: the compiled plan of the requested
    global batch in that many micro-batches (None when even one sequence per chip fails)."""
    s = tpu.parse(topology, num_slices)
    names, sizes = sharding.mesh_shape(config, s.num_chips)
    shape = dict(zip(names, sizes, strict=True))
    data = shape["data"] * shape["fsdp"]
    tried = {}

    def ok(b):
        if b not in tried:
            plan = _fits(_with_batch(config, b * data, 1), topology, num_slices)
            tried[b] = plan is not None and plan["memory"]["fits"]
        return tried[b]

    good, bad = 0, None
    b = 1
    while b <= limit and ok(b):
        good, b = b, b * 2
    bad = b if b <= limit else None
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    if good == 0:
        return dict(per_chip=0, micro_batches=None, plan=None, tried=tried)
    total = config.train.batch_size
    for m in range(max(1, math.ceil(total / (good * data))), total + 1):
        if total % m == 0 and (total // m) % data == 0 and total // m <= good * data:
            final = _fits(_with_batch(config, total, m), topology, num_slices)
            if final is not None and final["memory"]["fits"]:
                return dict(per_chip=good, micro_batches=m, plan=final, tried=tried)
    return dict(per_chip=good, micro_batches=None, plan=None, tried=tried)
