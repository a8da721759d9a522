"""The papers' pretraining runs planned on today's Cloud TPUs, from zhlm's compiled step.

  python tools/reproduce_tables.py tpu_plan [--workdir /tmp/zhlm_tpu_plan] [--quick]
  python tools/bench.py tpu [--parts] [--loader_records_per_second N]

For every run in ``RUNS`` (batch, sequence length and steps as the paper or its release gave
them, the source beside each) and every generation in ``GENERATIONS``: the smallest slice
whose chips hold the state (``zhlm.train.plan.precheck``: traced, not compiled, and it raises
``DoesNotFit`` for a slice too small), a per-chip micro-batch for it, then the real step
compiled by ``zhlm.train.plan.compile_plan`` (bf16 compute, FSDP over every chip, remat only
when one sequence per chip does not fit otherwise). Days = steps x the roofline step time: a
bound, not a forecast (the plan's docstring says how far each number goes).

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
compiles what is new; ``--quick`` plans only the tiny test row on the first generations.
"""

import dataclasses
import hashlib
import json
import math
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # this host only traces; libtpu compiles

DEFAULT_WORKDIR = "/tmp/zhlm_tpu_plan"
DAY = 86400.0


@dataclasses.dataclass(frozen=True)
class Run:
    """One pretraining run as published: what to plan and where the figures come from."""

    name: str
    recipe: str
    size: str
    batch: int
    seq: int
    steps: int
    source: str
    verified: bool = True  # False: the figure could not be checked against the paper here
    layers: int = 0  # > 0: that many layers instead of the size's (the quick test row)


_BERT = (
    "Devlin et al. 2019, App. A.2: batch 256 for 1,000,000 steps; seq 128 for 90% of the "
    "steps, 512 for the last 10%"
)
_WWM = (
    "ymcui/Chinese-BERT-wwm README, Model Comparison (Cui et al. 2021's release): 2M steps "
    "at max length 512, batch 512, AdamW, TPU Pod v3-32, random init"
)
RUNS = (
    Run("BERT-base, seq 128 phase", "bert", "base", 256, 128, 900_000, _BERT),
    Run("BERT-base, seq 512 phase", "bert", "base", 256, 512, 100_000, _BERT),
    Run("BERT-large, seq 128 phase", "bert", "large", 256, 128, 900_000, _BERT),
    Run("BERT-large, seq 512 phase", "bert", "large", 256, 512, 100_000, _BERT),
    Run("RoBERTa-wwm-ext-large", "roberta_wwm", "large", 512, 512, 2_000_000, _WWM),
    Run(
        "MacBERT-large",
        "macbert",
        "large",
        512,
        512,
        2_000_000,
        "Cui et al., journal version (IEEE TASLP 2021, arXiv 1906.08101), Sec. on pre-training: "
        "MacBERT-large trained from scratch for 2M steps at batch 512, LAMB, lr 1e-4, max "
        "length 512 throughout",
    ),
    Run(
        "ALBERT-xxlarge",
        "albert",
        "xxlarge",
        4096,
        512,
        125_000,
        "Lan et al. 2020, Sec. 4.1: batch 4096, LAMB lr 0.00176, 125,000 steps unless "
        "otherwise specified; inputs up to 512 tokens. The longer xxlarge run (1.5M steps) "
        "is not verified here: x12 the days",
    ),
    Run(
        "SpanBERT-large",
        "spanbert",
        "large",
        256,
        512,
        2_400_000,
        "Joshi et al. 2020, Sec. 4.2 (arXiv 1907.10529): batch 256 sequences of at most 512 "
        "tokens, 2.4M steps, AdamW",
    ),
)
QUICK_RUNS = (
    Run("tiny (test)", "bert", "tiny", 32, 64, 1000, "zhlm's tiny size, 1 layer: tests", layers=1),
)

# Accelerator types in order of size (the number is what Cloud TPU counts: v4 and v5p
# TensorCores, two per chip; v5e and v6e chips).
GENERATIONS = {
    "v4": (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    "v5litepod": (1, 4, 8, 16, 32, 64, 128, 256),
    "v5p": (8, 16, 32, 64, 128, 256, 512, 1024, 2048),
    "v6e": (1, 4, 8, 16, 32, 64, 128, 256),
}
# LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76
# minutes", abstract): BERT-large in 8,599 iterations at batch 65536/32768 instead of 1M,
# 76 minutes on a TPUv3 pod (1,024 chips), against about three days on 16 TPUv3 chips.
LAMB_CLAIM = (
    "Reference point: LAMB (You et al. 2020) trained BERT-large in 76 minutes on a TPU v3 pod "
    "(1,024 chips) with batch 65,536 (seq 128) / 32,768 (seq 512) for 8,599 iterations, "
    "instead of 1M iterations at batch 256 (about three days on 16 TPU v3 chips)."
)
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


# The code whose change changes the compiled step: a plan compiled before is not reused.
STEP_CODE = ("zhlm/models", "zhlm/masking", "zhlm/objectives.py", "zhlm/train/step.py")
STEP_CODE += ("zhlm/train/optim.py", "zhlm/train/state.py", "zhlm/train/plan.py")


def code_fingerprint() -> str:
    import zhlm

    root = os.path.dirname(os.path.dirname(os.path.abspath(zhlm.__file__)))
    h = hashlib.sha1()
    for rel in STEP_CODE:
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


def _key(config, topology) -> str:
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
    the step code's fingerprint); the host verdict is recomputed for the loader rate of this
    run (it is not part of the compiled program). ``stale``: with ``cached_only``, a plan
    compiled from other step code may stand in; it says so (``stale_code``)."""
    import glob

    from zhlm.train import plan as plan_lib
    from zhlm.train import tpu

    key = _key(config, topology)
    path = os.path.join(workdir, f"plan-{key}-{code_fingerprint()}.json")
    older = sorted(glob.glob(os.path.join(workdir, f"plan-{key}-*.json")), key=os.path.getmtime)
    if os.path.exists(path) or (cached_only and stale and older):
        with open(path if os.path.exists(path) else older[-1], encoding="utf-8") as f:
            p = json.load(f)
        p["stale_code"] = not os.path.exists(path)
    elif cached_only:
        raise NotCached(path)
    else:
        p = _slim(plan_lib.compile_plan(config, topology))
        os.makedirs(workdir, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(p, f, indent=1)
        os.replace(path + ".tmp", path)
    s = tpu.parse(topology)
    rate = p["time"]["sequences_per_second"]
    p["host"] = plan_lib.host_plan(s.chip, s.num_chips, rate, loader_rate)
    return p


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
    takes a plan compiled from older step code, marked in the table."""
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
    stale = " (older step code)" if p.get("stale_code") else ""
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


# The per-part cost of one step: each part switched off or changed and the step compiled
# again (one chip's share, as the plan's FLOP count uses), or compiled alone where it cannot
# be switched off. Deltas of the one-chip-share step (micro-batch work, the update scaled to
# this chip's shard), so collectives are not part of any figure.
PARTS_RUN = Run("BERT-base, seq 128 phase", "bert", "base", 256, 128, 900_000, _BERT)


def _fixed_masks(config, per_chip):
    """A ``mask_fn`` returning masks drawn once (the step without masking's cost), as
    ``bench.py masking`` times it on CPU: constants of the compiled program."""
    import jax
    import numpy as np

    from zhlm import masking
    from zhlm.data.synthetic import synthetic_batch

    with jax.default_device(jax.devices("cpu")[0]):
        batch = synthetic_batch(per_chip, config.data.max_seq_length)
        fixed = masking.mask_batch(batch, jax.random.key(1), config)
    fixed = {k: np.asarray(v) for k, v in fixed.items()}
    return lambda batch, rng, config: {**batch, **fixed}


def _attention_cost(one) -> dict:
    """cost_analysis of the attention core alone (scores, softmax, dropout on the
    probabilities, weighted sum), forward and backward, at the step's per-chip shapes."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from zhlm.models import dropout_rngs
    from zhlm.models.layers import attention
    from zhlm.train import sharding
    from zhlm.train.state import abstract_key

    cfg, config = one.model.config, one.config
    b, s = config.train.batch_size, config.data.max_seq_length

    class Core(nn.Module):
        @nn.compact
        def __call__(self, q, k, v, mask):
            return attention(q, k, v, mask, nn.Dropout(cfg.attention_dropout_rate), False)

    shape = (b, s, cfg.num_heads, cfg.head_dim)
    qkv = [jax.ShapeDtypeStruct(shape, cfg.dtype) for _ in range(3)]
    mask = jax.ShapeDtypeStruct((b, 1, 1, s), jnp.bool_)

    def fwd_bwd(q, k, v, mask, rng):
        def f(q, k, v):
            y = Core().apply({}, q, k, v, mask, rngs=dropout_rngs(rng, cfg))
            return jnp.sum(y.astype(jnp.float32))

        return jax.grad(f, argnums=(0, 1, 2))(q, k, v)

    with jax.set_mesh(one.mesh), nn.logical_axis_rules(sharding.rules(config)):
        compiled = jax.jit(fwd_bwd).lower(*qkv, mask, abstract_key()).compile()
    return compiled.cost_analysis()


def parts_table(
    generation="v5litepod", chips=8, run: Run = PARTS_RUN, extra=(), workdir=None, cached_only=False
) -> str:
    """The cost of each part of ``run``'s step on ``generation``-``chips`` (FSDP over the
    chips), as compiled FLOPs, bytes accessed and roofline ms per chip, and as a share.
    Kept in ``workdir`` like the plans (``cached_only``: compile nothing)."""
    from zhlm.train import tpu

    topology = f"{generation}-{chips * tpu.CHIPS[generation].cores_per_chip}"
    s = tpu.parse(topology)
    config = run_config(run)
    config.train.micro_batches = 1
    workdir = workdir or DEFAULT_WORKDIR
    name = f"parts-{_key(config, [topology, sorted(extra)])}-{code_fingerprint()}.json"
    path = os.path.join(workdir, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            rows, per_chip = json.load(f)
    elif cached_only:
        return f"(the parts of the step on {topology}: not compiled yet)"
    else:
        rows, per_chip = _parts_rows(config, s, topology, extra)
        os.makedirs(workdir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump([rows, per_chip], f)
    return _parts_markdown(rows, s.chip, run, topology, per_chip, config)


def _parts_rows(config, s, topology, extra):
    """``([(part, flops, bytes, how)], per-chip batch)``: see :func:`parts_table`."""
    from zhlm.train import plan as plan_lib

    _, trainer, state, *_ = plan_lib.precheck(config, topology)
    mesh, mc = trainer.mesh, trainer.model.config
    shard = plan_lib.per_chip_bytes(state) / plan_lib.whole_bytes(state)

    def total(costs):
        c = plan_lib.scale_costs(costs, config, mc, 1, mesh.shape["tensor"], shard)
        return c["flops"], c["bytes_accessed"]

    base = plan_lib.one_chip_costs(config, s, mesh)
    per_chip = base["trainer"].config.train.batch_size
    rows = [("whole step", *total(base), "compiled")]

    same = {"layer": base["layer"], "update": base["update"]}

    def variant(name, how, c=None, mask_fn=None, step_only=False):
        # Only the step's other parts change; the layer too where dropout does.
        keep = same if step_only else {"update": base["update"]}
        f, b = total(plan_lib.one_chip_costs(c or config, s, mesh, mask_fn, parts=keep))
        rows.append((name, rows[0][1] - f, rows[0][2] - b, how))

    variant(
        "masking",
        "step with masks fixed before (mask_fn)",
        mask_fn=_fixed_masks(config, per_chip),
        step_only=True,
    )
    no_drop = config.copy_and_resolve_references()
    no_drop.model.dropout_rate = no_drop.model.attention_dropout_rate = 0.0
    variant("dropout (threefry bits)", "step with both dropout rates 0", no_drop)
    if "rbg" in extra:
        rbg = config.copy_and_resolve_references()
        rbg.model.dropout_rng = "rbg"
        variant("dropout bits: threefry -> rbg (saving)", "step with dropout_rng=rbg", rbg)
    one_p = config.copy_and_resolve_references()
    p = config.masking.max_predictions_per_seq
    one_p.masking.max_predictions_per_seq = 1
    f, b = total(plan_lib.one_chip_costs(one_p, s, mesh, parts=same))
    k = p / (p - 1)
    rows.append(
        (
            f"MLM head at {p} positions",
            k * (rows[0][1] - f),
            k * (rows[0][2] - b),
            f"step with max_predictions_per_seq {p} -> 1, difference x {p}/{p - 1}",
        )
    )
    att = _attention_cost(base["trainer"])
    apps = mc.applications
    rows.append(
        (
            "attention core",
            apps * att.get("flops", 0.0),
            apps * att.get("bytes accessed", 0.0),
            f"compiled alone (fwd+bwd, dropout on the probabilities) x {apps} layers; not "
            "switched off",
        )
    )
    up = base["update"]
    rows.append(
        (
            "update (grad norm, clip, optimizer)",
            shard * up.get("flops", 0.0),
            shard * up.get("bytes accessed", 0.0),
            f"compiled alone on the full state, x this chip's shard ({shard:.3f})",
        )
    )
    return rows, per_chip


def _parts_markdown(rows, chip, run, topology, per_chip, config) -> str:
    from zhlm.train import plan as plan_lib

    base_t = plan_lib.roofline(chip, rows[0][1], rows[0][2])
    lines = [
        f"### What each part of the {run.name.split(',')[0]} step costs on {topology} "
        f"(per chip: {per_chip} x {run.seq}, {config.optim.name}, bf16, FSDP)",
        "",
        "| part | GFLOPs | share | GB accessed | share | roofline ms alone | how |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, f, b, how in rows:
        t = plan_lib.roofline(chip, f, b)
        lines.append(
            f"| {name} | {f / 1e9:,.1f} | {f / rows[0][1]:.1%} | {b / 1e9:,.2f} | "
            f"{b / rows[0][2]:.1%} | {t['seconds'] * 1e3:.2f} ({t['bound']}) | {how} |"
        )
    lines += [
        "",
        f"Whole step: roofline {base_t['seconds'] * 1e3:.2f} ms per chip ({base_t['bound']}-"
        f"bound: compute {base_t['compute_seconds'] * 1e3:.2f} ms, HBM "
        f"{base_t['hbm_seconds'] * 1e3:.2f} ms); collectives not included. A part's figures "
        "are the whole step's minus the step compiled without it (so XLA's fusion choices "
        "for the rest may shift them a little), except where it says 'compiled alone'. "
        "'Roofline ms alone' is the part's own bound (max of its FLOPs at peak and its bytes "
        "at HBM bandwidth); in the step the parts overlap. A negative figure: the step "
        "without that part, or with that change, accesses more by XLA's count (rbg's bits "
        "are the output of an RngBitGenerator op, threefry's are elementwise ops fused into "
        "their users; without dropout, attention takes jax.nn.dot_product_attention).",
    ]
    return "\n".join(lines)
