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
  ``m * (step - update + (applications - 1) * layer) / tensor + update * shard``. ``update``
  (gradient norm, clipping, the optimizer; compiled alone on the full state) runs once per
  step, not once per micro-batch, and each chip updates only its shard of the state
  (``shard`` = its share of the state bytes): counted m times at full size, it added 20% to
  the bytes of BERT-base's step in 8 micro-batches on one v5e chip. A one-chip slice's own
  program (no collectives) stands in for the one-chip program, its micro-batch loop's body
  counted once like the layer's. These are the FLOPs the chip executes, remat recomputation
  included; ``model_flops`` is zhlm's MFU formula (``metrics.train_flops_per_sequence``).
- Time is a roofline bound, not a prediction: the chip at its bf16 peak or its HBM bandwidth
  (``bytes accessed``, scaled as the FLOPs are), or ICI carrying the collectives' bytes,
  whichever takes longest, with everything else overlapped. XLA's bytes accessed counts the
  operands and results of every op, also those kept in on-chip memory, so the HBM term is
  pessimistic; ``mfu_without_hbm`` is the other end of the range. Not checked on a TPU.
- Host: the sequences/s each host must read (its chips x the roofline rate per chip, an upper
  bound since real steps are slower) beside a loader rate the caller measured
  (``tools/bench.py loader``); ``one_process_suffices`` compares the two.
"""

import dataclasses
import math
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from zhlm.data import pipeline
from zhlm.errors import UserError
from zhlm.models import dropout_rngs
from zhlm.train import hlo_stats, metrics, sharding, tpu
from zhlm.train import state as state_lib
from zhlm.train.step import abstract_key, make_trainer

HEADROOM = 0.95  # share of HBM a plan may use: the runtime keeps some for itself


class DoesNotFit(UserError):
    """The step cannot fit the chip's HBM; the message has the numbers."""


def abstract_batch(config, mesh, batch_size=None) -> dict:
    """The fields the loader gives this recipe, as sharded ShapeDtypeStructs."""
    b, s = batch_size or config.train.batch_size, config.data.max_seq_length
    spec = sharding.batch_sharding(mesh)
    names = ("input_ids", "token_type_ids", "attention_mask", "word_ids") + tuple(
        config.data.fields
    )
    names += ("segment_ids",) if config.data.pack else ()
    batch = {k: jax.ShapeDtypeStruct((b, s), jnp.int32, sharding=spec) for k in names}
    slots = (b, *pipeline.slot_shape(config.data))  # [B], or [B,K] for packed rows
    if config.data.pack:
        batch["instance_starts"] = jax.ShapeDtypeStruct(slots, jnp.int32, sharding=spec)
    if config.model.sentence_head != "none":
        batch["sentence_label"] = jax.ShapeDtypeStruct(slots, jnp.int32, sharding=spec)
    return batch


def per_chip_bytes(tree) -> int:
    """Bytes one chip holds of a tree of sharded ShapeDtypeStructs (its largest shard)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(
        math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize for x in leaves
    )


def whole_bytes(tree) -> int:
    """Bytes of a tree of ShapeDtypeStructs unsharded (what one chip holds without sharding)."""
    leaves = jax.tree_util.tree_leaves(tree)
    return sum(math.prod(x.shape) * jnp.dtype(x.dtype).itemsize for x in leaves)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


_LAYER_COSTS = {}  # this process's layer compiles, by what they depend on


def _layer_cost(trainer, batch_size) -> dict:
    """cost_analysis of one layer application's forward and backward on the trainer's mesh
    (remembered in this process: recipes of one size share their layer)."""
    cfg, mesh, config = trainer.model.config, trainer.mesh, trainer.config
    heads_only = {"sentence_head", "span_boundary_head", "export_family", "vocab_size"}
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in heads_only}
    key = (
        repr(sorted(fields.items())),
        batch_size,
        config.data.max_seq_length,
        mesh.devices.flat[0].device_kind,
        tuple(mesh.shape.items()),
        sharding.rules(config),
    )
    if key not in _LAYER_COSTS:
        _LAYER_COSTS[key] = _compile_layer(trainer, batch_size)
    return _LAYER_COSTS[key]


def _compile_layer(trainer, batch_size) -> dict:
    from zhlm.models.encoder import REMAT_POLICIES
    from zhlm.models.layers import TransformerLayer

    cfg, mesh, config = trainer.model.config, trainer.mesh, trainer.config
    # One layer's parameters, not the stack: with the stack, the gradient of the one slice it
    # reads is a stack-sized buffer of zeros, whose writes the scan's backward never does.
    cfg = dataclasses.replace(cfg, num_layers=1, inner_group_num=1, num_groups=1)
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
                rngs = dropout_rngs(rng, cfg)
                y, _ = layer.apply({"params": p}, x, jnp.int32(0), mask, rngs=rngs)
                return jnp.sum(y.astype(jnp.float32))

            # The value too: with remat and only the gradients returned, the first forward
            # pass is dead code and XLA drops it, hiding the recompute the step does pay.
            return jax.value_and_grad(f, argnums=(0, 1))(p, x)

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


def _one_chip(config, s, mesh, mask_fn=None):
    """The trainer of one chip's share: the per-chip micro-batch on a one-chip mesh."""
    c = config.copy_and_resolve_references()
    data = mesh.shape["data"] * mesh.shape["fsdp"]
    c.train.batch_size = config.train.batch_size // config.train.micro_batches // data
    c.train.micro_batches = 1
    c.train.mesh = (("data", 1), ("fsdp", 1), ("tensor", 1))
    kwargs = {} if mask_fn is None else {"mask_fn": mask_fn}
    return make_trainer(c, sharding.create_mesh(c, tpu.devices(tpu.one_chip(s))), **kwargs)


def update_cost(trainer, state=None) -> dict:
    """cost_analysis of what the step does once, after the micro-batches: the gradient norm,
    clipping and the optimizer update (``state.apply_gradients``), on the trainer's mesh."""
    state = trainer.abstract_state() if state is None else state
    grads = state["params"]

    def update(state, grads):
        return state_lib.apply_gradients(state, grads, trainer.tx), optax.tree.norm(grads)

    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(sharding.rules(trainer.config)):
        compiled = jax.jit(update, donate_argnums=0).lower(state, grads).compile()
    return compiled.cost_analysis()


def one_chip_costs(config, s, mesh, mask_fn=None, compiled_step=None, parts=None) -> dict:
    """cost_analysis dicts of one chip's share: ``step`` (its per-chip micro-batch, loops
    counted once), ``layer`` (one layer application, forward and backward), ``update`` (once
    per step, full state) and ``trip_counts`` of the step's loops; ``parts`` given (a dict
    with some of them), those are taken as they are instead of compiled. ``compiled_step``
    reuses a one-chip program already compiled (a one-chip slice's own step)."""
    one = _one_chip(config, s, mesh, mask_fn)
    out = dict(parts or {}, trainer=one)
    if "step" not in out:
        if compiled_step is None:
            batch = abstract_batch(one.config, one.mesh)
            compiled_step, _ = _compile_step(one, one.abstract_state(), batch)
        out["step"] = compiled_step.cost_analysis()
        out["trip_counts"] = hlo_stats.trip_counts(compiled_step.as_text())
    if "layer" not in out:  # only a layer loop XLA kept needs it (see scale_costs)
        kept = one.model.config.applications in out.get("trip_counts", ())
        out["layer"] = _layer_cost(one, one.config.train.batch_size) if kept else {}
    if "update" not in out:
        out["update"] = update_cost(one)
    return out


def scale_costs(costs, config, model_config, micro_batches, tensor, shard) -> dict:
    """Per-chip ``flops`` and ``bytes_accessed`` of a whole step from :func:`one_chip_costs`
    (see the module docstring): the micro-batch's work m times with the scanned layer's other
    applications added, the update once on this chip's ``shard`` of the state."""
    apps = model_config.applications
    # Only a loop XLA kept is undercounted; one it unrolled is counted in full already.
    missing = apps - 1 if apps in costs["trip_counts"] else 0
    step, layer, update = costs["step"], costs["layer"], costs["update"]

    def scaled(key):  # the tensor axis splits what the one-chip program computes whole
        micro = step.get(key, 0.0) - update.get(key, 0.0) + missing * layer.get(key, 0.0)
        return (micro_batches * micro) / tensor + shard * update.get(key, 0.0)

    return dict(flops=scaled("flops"), bytes_accessed=scaled("bytes accessed"), missing=missing)


def _flops(config, s, mesh, model_config, shard=1.0, compiled_step=None) -> dict:
    costs = one_chip_costs(config, s, mesh, compiled_step=compiled_step)
    m, tensor = config.train.micro_batches, mesh.shape["tensor"]
    total = scale_costs(costs, config, model_config, m, tensor, shard)
    per_seq = metrics.train_flops_per_sequence(
        model_config, config.data.max_seq_length, config.masking.max_predictions_per_seq
    )
    return dict(
        flops=total["flops"],  # per chip per step, as compiled (remat recompute included)
        bytes_accessed=total["bytes_accessed"],
        model_flops=per_seq * config.train.batch_size / s.num_chips,  # zhlm's MFU count
        step_cost_analysis_flops=costs["step"].get("flops", 0.0),  # one chip's step, loops once
        layer_flops=costs["layer"].get("flops", 0.0),
        update_flops=costs["update"].get("flops", 0.0),  # full state, once per step
        update_bytes=costs["update"].get("bytes accessed", 0.0),
        applications=model_config.applications,
    )


def roofline(chip, flops, bytes_accessed, comm_bytes=0.0) -> dict:
    """The three bounds of one step and the largest: compute, HBM and (where known) ICI."""
    t_compute = flops / chip.peak_flops
    t_hbm = bytes_accessed / chip.hbm_bandwidth
    t_ici = comm_bytes / chip.ici_bandwidth if chip.ici_bandwidth else 0.0
    t = max(t_compute, t_hbm, t_ici)
    bound = "compute" if t == t_compute else "hbm" if t == t_hbm else "ici"
    return dict(
        compute_seconds=t_compute, hbm_seconds=t_hbm, ici_seconds=t_ici, seconds=t, bound=bound
    )


def _timing(config, chip, flops, comm_bytes) -> dict:
    r = roofline(chip, flops["flops"], flops["bytes_accessed"], comm_bytes)
    t, t_compute, t_ici = r["seconds"], r["compute_seconds"], r["ici_seconds"]
    batch, seq = config.train.batch_size, config.data.max_seq_length
    return dict(
        compute_seconds=t_compute,
        hbm_seconds=r["hbm_seconds"],
        ici_seconds=t_ici if chip.ici_bandwidth else None,  # no ICI figure on the v4 page
        bound=r["bound"],
        step_seconds=t,
        sequences_per_second=batch / t,
        tokens_per_second=batch * seq / t,
        mfu=flops["model_flops"] / (t * chip.peak_flops),
        # Without the HBM term (XLA's bytes accessed counts every op's operands and results,
        # also those that never leave on-chip memory): the optimistic end of the range.
        mfu_without_hbm=flops["model_flops"] / (max(t_compute, t_ici) * chip.peak_flops),
    )


def host_plan(chip, chips: int, sequences_per_second: float, loader_rate=None) -> dict:
    """What each host must feed: its chips' share of ``sequences_per_second`` (the slice's
    roofline rate), beside ``loader_rate`` (records/s of one loader process, measured by the
    caller; None: not compared). ``full_host_*``: the same for a host with all its chips, the
    case of every host of a larger slice, since data parallelism keeps the per-chip rate."""
    on_host = min(chip.chips_per_host, chips)
    per_chip = sequences_per_second / chips
    need, full = on_host * per_chip, chip.chips_per_host * per_chip
    return dict(
        hosts=math.ceil(chips / chip.chips_per_host),
        chips_per_host=on_host,
        sequences_per_second_per_host=need,
        full_host_chips=chip.chips_per_host,
        full_host_sequences_per_second=full,
        loader_records_per_second=loader_rate,
        one_process_suffices=None if loader_rate is None else loader_rate >= need,
        full_host_one_process_suffices=None if loader_rate is None else loader_rate >= full,
    )


def build(config, topology: str, num_slices: int = 1):
    """``(slice, trainer, state, batch)``: the trainer ``zhlm-pretrain`` would build, on the
    slice's compile-only devices, with its abstract state and batch. Compiles nothing."""
    s = tpu.parse(topology, num_slices)
    mesh = sharding.create_mesh(config, tpu.devices(s))
    trainer = make_trainer(config, mesh)
    return s, trainer, trainer.abstract_state(), abstract_batch(config, mesh)


def precheck(config, topology: str, num_slices: int = 1):
    """``(slice, trainer, state, batch, state_bytes, batch_bytes)`` after checking, without
    compiling, that this chip's share of the state and batch leave room in its HBM; raises
    :class:`DoesNotFit` when they do not (a search can skip a slice for the cost of a trace)."""
    s, trainer, state, batch = build(config, topology, num_slices)
    state_bytes, batch_bytes = per_chip_bytes(state), per_chip_bytes(batch)
    if state_bytes + batch_bytes > HEADROOM * s.chip.hbm_bytes:
        raise DoesNotFit(
            f"{topology}: parameters + optimizer state {_gb(state_bytes)} and batch "
            f"{_gb(batch_bytes)} per chip exceed {HEADROOM:.0%} of {_gb(s.chip.hbm_bytes)} "
            f"HBM before any activation (mesh {dict(trainer.mesh.shape)}); shard wider "
            "(config.train.mesh fsdp) or take a chip with more HBM"
        )
    return s, trainer, state, batch, state_bytes, batch_bytes


def memory_plan(config, topology: str, num_slices: int = 1) -> dict:
    """Only the memory of :func:`compile_plan` (one compile instead of four): for searches."""
    s, trainer, state, batch, state_bytes, batch_bytes = precheck(config, topology, num_slices)
    compiled, _ = _compile_step(trainer, state, batch)
    return _memory(compiled, state_bytes, batch_bytes, s.chip.hbm_bytes)


def compile_plan(config, topology: str, num_slices: int = 1, loader_records_per_second=None):
    """Compiles ``config``'s pretraining step for ``topology`` (a Cloud TPU accelerator type,
    e.g. ``v5litepod-16``) and returns the plan as a dict of plain values.

    Raises :class:`DoesNotFit` before compiling when this chip's share of the state and batch
    alone exceeds its HBM; otherwise ``plan['memory']['fits']`` says whether it fits.
    ``loader_records_per_second`` (one loader process's rate, measured) fills ``plan['host']``'s
    verdict."""
    s, trainer, state, batch, state_bytes, batch_bytes = precheck(config, topology, num_slices)
    mesh = trainer.mesh
    compiled, seconds = _compile_step(trainer, state, batch)
    slice_of = [d.slice_index if num_slices > 1 else 0 for d in mesh.devices.flat]
    hlo = compiled.as_text()
    comms = hlo_stats.collectives(hlo, slice_of)
    # On one chip the slice's own program has no collective loops: its cost counts the
    # micro-batch loop's body once (when XLA kept that loop), as the one-chip program would.
    m = config.train.micro_batches
    same = s.num_chips == 1 and (m == 1 or m in hlo_stats.trip_counts(hlo))
    shard = state_bytes / max(whole_bytes(state), 1)  # this chip's share of the update
    flops = _flops(config, s, mesh, trainer.model.config, shard, compiled if same else None)
    comm_bytes = sum(c["bytes"] - c["cross_slice_bytes"] for c in comms.values())
    timing = _timing(config, s.chip, flops, comm_bytes)
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
        time=timing,
        host=host_plan(
            s.chip, s.num_chips, timing["sequences_per_second"], loader_records_per_second
        ),
        collectives=comms,
    )


def _with_batch(config, batch_size, micro_batches):
    c = config.copy_and_resolve_references()
    c.train.batch_size, c.train.micro_batches = batch_size, micro_batches
    return c


def _fits(config, topology, num_slices) -> bool:
    """Whether the step fits, from its memory alone (one compile; DoesNotFit: none)."""
    try:
        return memory_plan(config, topology, num_slices)["fits"]
    except DoesNotFit:
        return False


def find_batch(
    config, topology: str, num_slices: int = 1, limit: int = 4096, loader_records_per_second=None
) -> dict:
    """The largest per-chip micro-batch that fits (doubling, then bisecting, each candidate
    compiled for its memory only), and the ``micro_batches`` that reach
    ``config.train.batch_size`` with it.

    Returns ``per_chip``, ``micro_batches`` and ``plan``: the full plan of the requested
    global batch in that many micro-batches (None when even one sequence per chip fails);
    ``limit``: the largest tried (the batch's share per chip, when it is smaller)."""
    s = tpu.parse(topology, num_slices)
    names, sizes = sharding.mesh_shape(config, s.num_chips)
    shape = dict(zip(names, sizes, strict=True))
    data = shape["data"] * shape["fsdp"]
    total = config.train.batch_size
    limit = min(limit, max(1, total // data))  # more per chip than the batch has: no use
    tried = {}

    def ok(b):
        if b not in tried:
            tried[b] = _fits(_with_batch(config, b * data, 1), topology, num_slices)
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
        return dict(per_chip=0, micro_batches=None, plan=None, tried=tried, limit=limit)
    for m in range(max(1, math.ceil(total / (good * data))), total + 1):
        if total % m == 0 and (total // m) % data == 0 and total // m <= good * data:
            c = _with_batch(config, total, m)
            try:
                final = compile_plan(c, topology, num_slices, loader_records_per_second)
            except DoesNotFit:
                continue
            if final["memory"]["fits"]:
                return dict(per_chip=good, micro_batches=m, plan=final, tried=tried, limit=limit)
    return dict(per_chip=good, micro_batches=None, plan=None, tried=tried, limit=limit)
