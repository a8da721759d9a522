"""The papers' pretraining runs planned on today's Cloud TPUs, from zhlm's compiled step.

  python tools/reproduce_tables.py tpu_plan [--workdir /tmp/zhlm_tpu_plan] [--quick]
  python tools/bench.py tpu [--parts] [--loader_records_per_second N]

For every run in ``tools/tpu_runs.py``'s ``RUNS`` (batch, sequence length and steps as the
paper or its release gave them, the source beside each) and every generation in
``GENERATIONS``: the smallest slice whose chips hold the state (``zhlm.train.plan.precheck``:
traced, not compiled, and it raises ``DoesNotFit`` for a slice too small), a per-chip
micro-batch for it, then the real step compiled by ``zhlm.train.plan.compile_plan`` (bf16
compute, FSDP over every chip, remat only when one sequence per chip does not fit otherwise).
Days = steps x the roofline step time: a bound, not a forecast (the plan's docstring says how
far each number goes).

The micro-batch search is cheap on purpose (a BERT-large step takes minutes to compile here):
the largest power of two that divides the per-chip batch and whose activations, estimated
from the model's shape with constants measured on a compiled BERT-base step, fit in half of
the HBM the state leaves; the compile then checks it (a program that does not fit is
compiled again at half the micro-batch), and when its memory says a micro-batch at least
twice as large would fit with 10% to spare, that one is compiled too and kept if it fits.
The micro-batch matters to the bound: each micro-batch reads the weights again, so at one
sequence per chip an HBM-bound step is mostly weight traffic. ``--find_batch`` uses
``plan.find_batch`` instead (largest that fits, many compiles).

Every plan is kept as JSON in the workdir, keyed by the config and the slice, so a rerun only
compiles what is new (after an edit of the step code, what lowers to a new program:
``program_id``); ``--quick`` plans only the tiny test row on the first generations.
"""

import hashlib
import json
import math
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this host only traces; libtpu compiles

from tpu_runs import GENERATIONS, LAMB_CLAIM, QUICK_RUNS, RUNS, Run  # noqa: E402

DEFAULT_WORKDIR = "/tmp/zhlm_tpu_plan"
DAY = 86400.0


# Activation bytes per sequence, per layer application, per token: C_HIDDEN per hidden unit
# and C_SCORES per attention score, no remat, bf16 compute. Measured on a compiled BERT-base
# step (v5e, 32 x 128, dropout on): 3.99 GB of temporaries, 0.44 GB of them the fp32
# gradients, is 111 MB per sequence = 74 x H + 10 x A x S bytes per token and layer; rounded
# up here since an estimate that is too large only costs micro-batches.
C_HIDDEN, C_SCORES = 96, 12
FULL_REMAT_SHARE = 0.15  # what full remat keeps of that (the layer inputs and a recompute)


def run_config(run: Run, remat="none"):
    """The recipe's config at the run's size and shape: bf16 compute, FSDP over every chip,
    15% of the positions predicted (BERT's 20 at 128, 77 at 512)."""
    from zhlm import config_files

    c = config_files.load(run.recipe, run.size)
    c.model.dtype, c.model.remat = "bfloat16", remat
    c.model.num_layers = run.layers or c.model.num_layers
    c.data.max_seq_length = run.seq
    c.masking.max_predictions_per_seq = math.ceil(0.15 * run.seq)
    c.train.batch_size, c.train.num_steps, c.train.micro_batches = run.batch, run.steps, 1
    c.train.mesh = (("data", 1), ("fsdp", -1), ("tensor", 1))
    return c


# The code whose change may change the compiled step or the plan's numbers: the fast way to
# know a kept plan is current (its file name). When it changed, a plan still carries over if
# its program did not (program_id). zhlm/train/metrics.py (the MFU formula) is not needed:
# what it gives is recomputed on every read (_refresh).
STEP_CODE = ("zhlm/models", "zhlm/masking", "zhlm/train/objectives.py", "zhlm/train/step.py")
STEP_CODE += ("zhlm/train/optim.py", "zhlm/train/state.py", "zhlm/train/plan.py")
STEP_CODE += ("zhlm/train/sharding.py", "zhlm/train/sums.py", "zhlm/train/tpu.py")
STEP_CODE += ("zhlm/train/hlo_stats.py",)
# The code that turns a compiled program into a plan's numbers, which the program does not show.
PLANNER_CODE = ("zhlm/train/plan.py", "zhlm/train/tpu.py", "zhlm/train/hlo_stats.py")


def compiler() -> str:
    """The compiler a plan's memory and costs come from: jax, jaxlib and libtpu versions and
    libtpu's flags. The lowered program does not show them, so plans keep them beside the
    program (``compiler``) and one compiled by another compiler is not served as current."""
    from importlib import metadata

    versions = []
    for name in ("jax", "jaxlib", "libtpu"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} none")
    flags = os.environ.get("LIBTPU_INIT_ARGS", "")
    return ", ".join(versions) + (f", LIBTPU_INIT_ARGS={flags}" if flags else "")


def code_fingerprint(paths=STEP_CODE) -> str:
    import zhlm

    root = os.path.dirname(os.path.dirname(os.path.abspath(zhlm.__file__)))
    h = hashlib.sha1()
    for rel in paths:
        path = os.path.join(root, rel)
        files = (
            [path]
            if path.endswith(".py")
            else sorted(
                os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py")
            )
        )
        for name in files:
            with open(name, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:12]


def program_id(config, topology) -> str:
    """What a plan's numbers depend on: the step as lowered for the slice (StableHLO without
    source locations), the slice, and the planner's code. An edit of the step code that leaves
    the program as it was (a new option left off, a comment) keeps the id, so kept plans carry
    over for 2 s of tracing instead of minutes of compiling each."""
    import flax.linen as nn
    import jax

    from zhlm.train import plan as plan_lib
    from zhlm.train import sharding
    from zhlm.train.state import abstract_key

    _, trainer, state, batch = plan_lib.build(config, topology)
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(sharding.rules(trainer.config)):
        text = trainer.step_fn.lower(state, batch, abstract_key()).as_text()
    h = hashlib.sha1(f"{topology}\n{code_fingerprint(PLANNER_CODE)}\n".encode())
    h.update(text.encode())
    return h.hexdigest()[:16]


def _read(path):
    """A kept plan, or None where the file is not one (cut short, a merge conflict): it is
    compiled again, never served."""
    try:
        with open(path, encoding="utf-8") as f:
            p = json.load(f)
    except (OSError, ValueError):
        return None
    return p if isinstance(p, dict) and "time" in p else None


def _same_program(workdir, program, current):
    """A kept plan of ``program`` by this compiler in ``workdir``, or None; ``current`` ends
    the names of plans of this step code (those are copied, not renamed: another config may
    name them)."""
    import glob

    here = compiler()
    for name in sorted(glob.glob(os.path.join(workdir, "plan-*.json"))):
        p = _read(name)
        if p and p.get("program") == program and p.get("compiler") == here:
            return name, name.endswith(f"-{current}.json")
    return None, False


def _write(p: dict, path: str):
    """Written whole or not at all: into a file of its own, then renamed over ``path``."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(p, f, indent=1)
    os.replace(tmp, path)


def _refresh(p: dict, config, topology, loader_rate) -> dict:
    """What a kept plan's numbers get from code outside its program, computed again on every
    read: zhlm's MFU count (``zhlm.train.metrics``), the MFU it gives against the roofline
    time, and the host's share against this run's loader rate."""
    from zhlm.models import build_model
    from zhlm.train import metrics, tpu
    from zhlm.train import plan as plan_lib

    s = tpu.parse(topology)
    model_config = build_model(config).config
    per_seq = metrics.train_flops_per_sequence(
        model_config, config.data.max_seq_length, config.masking.max_predictions_per_seq
    )
    flops = dict(p["flops"], model_flops=per_seq * config.train.batch_size / s.num_chips)
    comm_bytes = sum(c["bytes"] - c["cross_slice_bytes"] for c in p["collectives"].values())
    time = plan_lib._timing(config, s.chip, flops, comm_bytes)  # the compiled plan's formula
    host = plan_lib.host_plan(s.chip, s.num_chips, time["sequences_per_second"], loader_rate)
    return dict(p, flops=flops, time=time, host=host)


def plan_key(config, topology) -> str:
    text = json.dumps([config.to_dict(), topology], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _slim(plan: dict) -> dict:
    """The plan without each collective's instruction list (kept small on disk)."""
    comms = {
        kind: {k: v for k, v in c.items() if k != "ops"} for kind, c in plan["collectives"].items()
    }
    return {**plan, "collectives": comms}


class NotCached(LookupError):
    """``cached_only`` and no plan for this config and slice in the workdir yet."""


def cached_plan(config, topology, workdir, loader_rate=None, cached_only=False, stale=False):
    """``compile_plan`` through the JSON cache (files named by the config and slice, then
    the step code's fingerprint; a plan whose :func:`program_id` is this one's is taken over
    under the new name when the code changed but the program did not). Only a plan by this
    :func:`compiler` is current. What code outside the program gives (MFU, the host verdict
    for this run's loader rate) is computed again (:func:`_refresh`).
    ``stale``: with ``cached_only``, a plan compiled from other step code or by another
    compiler may stand in; it says so (``stale_code``)."""
    import glob

    from zhlm.train import plan as plan_lib

    key, current, here = plan_key(config, topology), code_fingerprint(), compiler()
    path = os.path.join(workdir, f"plan-{key}-{current}.json")
    p = _read(path) if os.path.exists(path) else None
    if p is not None and p.get("compiler") != here:
        p = None  # another compiler's numbers
    program = None
    if p is None and os.path.isdir(workdir):
        program = program_id(config, topology)
        kept, in_use = _same_program(workdir, program, current)
        if kept:  # the step code changed, this program did not: the plan carries over
            p = _read(kept)
            if in_use:  # another config's plan, the same program: copied under this one's name
                p.update(recipe=config.recipe, size=config.model.size)
                _write(p, path)
            else:
                os.replace(kept, path)
    if p is None and cached_only and stale:
        older = sorted(glob.glob(os.path.join(workdir, f"plan-{key}-*.json")), key=os.path.getmtime)
        p = next((q for q in map(_read, reversed(older)) if q), None)
        if p is None:
            raise NotCached(path)
        p["stale_code"] = True  # other step code or another compiler
    elif p is None and cached_only:
        raise NotCached(path)
    elif p is None:
        p = _slim(plan_lib.compile_plan(config, topology))
        p["program"], p["compiler"] = program or program_id(config, topology), here
        os.makedirs(workdir, exist_ok=True)
        _write(p, path)
    p.setdefault("stale_code", False)
    return _refresh(p, config, topology, loader_rate)


def estimate_bytes(config, model_config, per_chip: int) -> float:
    """Activation bytes of ``per_chip`` sequences (see C_HIDDEN): an estimate, checked later."""
    s, h, a = config.data.max_seq_length, model_config.hidden_size, model_config.num_heads
    per_seq = model_config.applications * s * (C_HIDDEN * h + C_SCORES * a * s)
    per_seq += 12 * config.masking.max_predictions_per_seq * model_config.padded_vocab_size
    share = FULL_REMAT_SHARE if config.model.remat == "full" else 1.0
    return per_chip * per_seq * share


def _powers_of_two_dividing(n: int):
    return [b for b in (2**i for i in range(n.bit_length(), -1, -1)) if b <= n and n % b == 0]


def smallest_slice(run: Run, generation: str, remat="none"):
    """``(topology, state bytes per chip, model config)`` of the first slice of the generation
    whose chips hold the state and one sequence each, or None (traced, nothing compiled)."""
    from zhlm.train import plan as plan_lib
    from zhlm.train import tpu

    for n in GENERATIONS[generation]:
        topology = f"{generation}-{n}"
        chips = tpu.parse(topology).num_chips
        if run.batch % chips:
            return None  # the paper's batch cannot be split over more chips
        c = run_config(run, remat)
        c.train.batch_size = chips  # one sequence per chip: the state decides
        try:
            _, trainer, *_, state_bytes, _ = plan_lib.precheck(c, topology)
        except plan_lib.DoesNotFit:
            continue
        return topology, state_bytes, trainer.model.config
    return None


def choose_micro_batch(run: Run, topology, state_bytes, model_config, remat) -> int:
    """The largest power of two per chip dividing the run's per-chip batch whose estimated
    activations fit in half of what the state (and its fp32 gradients) leave of the HBM."""
    from zhlm.train import plan as plan_lib
    from zhlm.train import tpu

    s = tpu.parse(topology)
    per_chip_batch = run.batch // s.num_chips
    free = plan_lib.HEADROOM * s.chip.hbm_bytes - 2 * state_bytes
    config = run_config(run, remat)
    for b in _powers_of_two_dividing(per_chip_batch):
        if estimate_bytes(config, model_config, b) <= free / 2:
            return b
    return 0


def plan_cell(
    run: Run, generation: str, workdir: str, loader_rate=None, find=False, cached_only=False
) -> dict:
    """The run on the generation's smallest slice that fits: ``topology``, ``per_chip``,
    ``micro_batches``, ``plan`` and ``days``, or ``note`` saying why there is none.
    ``cached_only``: True compiles nothing (cells not in the workdir say so); "stale" also
    takes a plan compiled from older step code or by another compiler, marked in the table."""
    from zhlm.train import plan as plan_lib

    best = None
    for remat in ("none", "full"):
        found = smallest_slice(run, generation, remat)
        if found is None:
            return dict(note="no slice holds the state")
        topology, state_bytes, model_config = found
        config = run_config(run, remat)
        if find:
            fb = plan_lib.find_batch(config, topology, loader_records_per_second=loader_rate)
            if fb["plan"] is not None:
                p = fb["plan"]
                return _cell(run, topology, fb["per_chip"], fb["micro_batches"], _slim(p))
            continue
        cell = _fit(
            run, config, topology, state_bytes, model_config, workdir, loader_rate, cached_only
        )
        if cell.get("note", "").startswith("not compiled"):
            return best or cell
        if "plan" in cell and (best is None or cell["days"] < best["days"]):
            best = cell
        # Remat only where needed: when, without it, fewer than 4 sequences fit per chip
        # (each micro-batch re-reads the weights) and the batch has more to give.
        whole = best is not None and best["per_chip"] == run.batch // _chips(topology)
        if best is not None and (best["per_chip"] >= 4 or whole):
            return best
    return best or dict(note="one sequence per chip does not fit, even with full remat")


def _fit(run, config, topology, state_bytes, model_config, workdir, loader_rate, cached_only):
    """The cell at the estimated micro-batch, halved until it fits, then grown (``_grow``)
    if its memory leaves room: the one with the shorter roofline step."""
    from zhlm.train import plan as plan_lib

    remat = config.model.remat
    b = choose_micro_batch(run, topology, state_bytes, model_config, remat)
    if b == 0 and remat == "none":
        return dict(note="not even one sequence per chip by the estimate")
    b = max(b, 1)
    while b >= 1:
        config.train.micro_batches = run.batch // b // _chips(topology)
        try:
            stale = cached_only == "stale"
            p = cached_plan(config, topology, workdir, loader_rate, bool(cached_only), stale)
        except NotCached:
            return dict(note=f"not compiled yet ({topology}, {b} per chip, remat {remat})")
        except plan_lib.DoesNotFit:
            p = dict(memory=dict(fits=False))
        if p["memory"]["fits"]:
            try:
                grown = _grow(
                    run, config, topology, b, p, state_bytes, workdir, loader_rate, cached_only
                )
            except NotCached:
                grown = None
            if grown and grown[1]["time"]["step_seconds"] < p["time"]["step_seconds"]:
                b, p = grown
            return _cell(run, topology, b, run.batch // b // _chips(topology), p)
        b //= 2
    return dict(note="one sequence per chip does not fit")


def _grow(run, config, topology, b, p, state_bytes, workdir, loader_rate, cached_only=False):
    """``(b', plan)`` at the largest per-chip micro-batch the compiled memory of ``p`` says
    would still fit with 10% to spare, when that is at least twice ``b``; None otherwise or
    when it does not fit after all. Fewer micro-batches re-read the weights fewer times,
    which is most of an HBM-bound step's bytes at one sequence per chip."""
    from zhlm.train import plan as plan_lib

    usable = 0.9 * plan_lib.HEADROOM * p["memory"]["hbm_bytes"]
    fixed = state_bytes * 5 / 3  # the state, its gradients and their accumulator (Adam/LAMB)
    per_seq = max(p["memory"]["total_bytes"] - fixed, 0.0) / b
    per_chip_batch = run.batch // _chips(topology)
    for b2 in _powers_of_two_dividing(per_chip_batch):
        if b2 >= 2 * b and p["memory"]["total_bytes"] + (b2 - b) * per_seq <= usable:
            c = config.copy_and_resolve_references()
            c.train.micro_batches = per_chip_batch // b2
            try:
                stale = cached_only == "stale"
                p2 = cached_plan(c, topology, workdir, loader_rate, bool(cached_only), stale)
            except plan_lib.DoesNotFit:
                return None
            return (b2, p2) if p2["memory"]["fits"] else None
    return None


def _chips(topology) -> int:
    from zhlm.train import tpu

    return tpu.parse(topology).num_chips


def _cell(run, topology, per_chip, micro_batches, p) -> dict:
    return dict(
        topology=topology,
        per_chip=per_chip,
        micro_batches=micro_batches,
        plan=p,
        days=run.steps * p["time"]["step_seconds"] / DAY,
    )


def chips_for(cell: dict, run: Run, generation: str, days: float):
    """The smallest listed slice that would finish in ``days`` if the step time fell as
    1/chips from the compiled cell (per-chip work held; collectives not compiled), or None."""
    chips0 = cell["plan"]["chips"]
    for n in GENERATIONS[generation]:
        chips = _chips(f"{generation}-{n}")
        if chips >= chips0 and run.batch % chips == 0 and cell["days"] * chips0 / chips <= days:
            return f"{generation}-{n}"
    return None


def _fmt_days(d: float) -> str:
    return f"{d:,.1f}" if d < 100 else f"{d:,.0f}"


def table(
    runs, generations, workdir, loader_rate=None, find=False, target_days=30.0, cached_only=False
) -> str:
    """The plan table as Markdown (one line per run and generation), with the notes."""
    rate = f"{loader_rate:,.0f} records/s" if loader_rate else "not measured"
    lines = [
        "### The papers' pretraining runs on Cloud TPU (compiled here, not run)",
        "",
        f"One loader process: {rate} (``tools/bench.py loader``, this run).",
        "",
        "| run | paper: batch x seq, steps | generation | smallest slice that fits | "
        "per chip x micro-batches, remat | HBM used | roofline step (bound) | days | "
        "MFU (no-HBM bound) | host must feed (seq/s) | one loader process | "
        f"slice for <= {target_days:.0f} days (scaled) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    sources = {}
    for run in runs:
        sources.setdefault(run.source, len(sources) + 1)
        mark = "" if run.verified else " (unverified)"
        ref = sources[run.source]
        head = f"| {run.name} | {run.batch} x {run.seq}, {run.steps:,}{mark} [{ref}]"
        for gen in generations:
            cell = plan_cell(run, gen, workdir, loader_rate, find, cached_only)
            if "plan" not in cell:
                lines.append(f"{head} | {gen} | {cell['note']} |" + " |" * 8)
                continue
            lines.append(f"{head} | {gen} | " + _cell_columns(cell, run, gen, target_days))
    lines += ["", LAMB_CLAIM, "", "Sources:"]
    lines += [f"[{i}] {src}" for src, i in sources.items()]
    lines += ["", *NOTES]
    return "\n".join(lines)


def _cell_columns(cell, run, gen, target_days) -> str:
    p, t, m, h = cell["plan"], cell["plan"]["time"], cell["plan"]["memory"], cell["plan"]["host"]
    verdict = "n/a"
    stale = " (older step code or compiler)" if p.get("stale_code") else ""
    if h["loader_records_per_second"]:
        ok = "yes" if h["one_process_suffices"] else "**no**"
        full = "yes" if h["full_host_one_process_suffices"] else "**no**"
        verdict = f"{ok}; full host of {h['full_host_chips']}: {full}"
    scaled = chips_for(cell, run, gen, target_days) or "beyond the batch"
    return (
        f"{cell['topology']} ({p['chips']} chips) | {cell['per_chip']} x {cell['micro_batches']}"
        f", {p['remat']} | {m['total_bytes'] / 1e9:.1f} / {m['hbm_bytes'] / 1e9:.0f} GB | "
        f"{t['step_seconds'] * 1e3:,.0f} ms ({t['bound']}){stale} | {_fmt_days(cell['days'])} | "
        f"{t['mfu']:.0%} ({t['mfu_without_hbm']:.0%}) | "
        f"{h['sequences_per_second_per_host']:,.0f} "
        f"(full host {h['full_host_sequences_per_second']:,.0f})"
        f" | {verdict} | {scaled} |"
    )


NOTES = (
    "How the numbers come about: each cell is zhlm-compile's plan of the recipe's real step "
    "(masking, model, losses, optimizer; bf16 compute, fp32 master weights, FSDP over all "
    "chips) compiled by libtpu for that slice on this CPU host. Memory is XLA's buffer "
    "assignment. The step time is a roofline bound: the per-chip FLOPs at the chip's bf16 "
    "peak, XLA's bytes accessed at its HBM bandwidth, or the collectives' bytes over ICI, "
    "whichever is longest; XLA's bytes accessed counts on-chip traffic too, so HBM-bound "
    "cells are pessimistic and the no-HBM MFU is the other end. Days = steps x that bound: "
    "a real run is slower (input, host overhead, imperfect overlap), never faster. 'Scaled' "
    "divides the days by the chip ratio, assuming the per-chip step is unchanged with more "
    "chips (fewer micro-batches each), which holds while the collectives stay hidden; those "
    "slices were not compiled. The host column: the sequences/s each host must read at that "
    "rate (its chips x per-chip rate; 'full host' for every host of a bigger slice) against "
    "one loader process's measured records/s.",
)


def tpu_plan_table(
    scale=None, workdir=None, quick=False, loader_rate=None, find=False, cached_only=False
):
    """What ``reproduce_tables.py tpu_plan`` prints (``cached_only``: compile nothing, leave
    the cells not in the workdir yet as such)."""
    del scale  # one table: the papers' sizes (quick: a tiny row for tests)
    workdir = workdir or DEFAULT_WORKDIR
    runs, gens = (QUICK_RUNS, ("v5litepod",)) if quick else (RUNS, tuple(GENERATIONS))
    return table(runs, gens, workdir, loader_rate, find, cached_only=cached_only)
