"""The cost of each part of a pretraining step on a Cloud TPU (masking, dropout's random bits,
the MLM head, attention, the update), from libtpu's compiler on this host: each part switched
off or changed and the step compiled again, or compiled alone where it cannot be switched off.
Each figure is one chip's share (micro-batch work, the update scaled to the chip's shard, as the
plan's FLOP count takes it), so collectives are in none of them.

  python tools/bench.py tpu [--parts-generation v5litepod --parts-chips 8 --rbg]
"""

import json
import os

from tpu_plan import DEFAULT_WORKDIR, code_fingerprint, plan_key, run_config
from tpu_runs import PARTS_RUN, Run


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
    name = f"parts-{plan_key(config, [topology, sorted(extra)])}-{code_fingerprint()}.json"
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
    flash = config.copy_and_resolve_references()
    flash.model.attention_impl = "flash"
    variant(
        "attention: xla -> flash kernels (saving)",
        "step with model.attention_impl=flash",
        flash,
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
