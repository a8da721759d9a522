"""``zhlm-compile``: compile the pretraining step for a Cloud TPU slice, here, and print its plan.

  zhlm-compile --config=configs/bert.py:base --topology=v5litepod-16 \
      --config.train.batch_size=512 --config.model.dtype=bfloat16
  zhlm-compile --config=configs/bert.py:large --topology=v4-32 --num_slices=2 --find_batch
  zhlm-compile ... --json=plan.json --loader_records_per_second=25000

Needs libtpu (``pip install -e '.[tpu]'``), not a TPU. Per chip it prints HBM for the state,
the batch and the temporaries against the chip's HBM and whether that fits; FLOPs per step
against zhlm's MFU formula; a roofline step time with the sequences/s, tokens/s and MFU it
implies; the sequences/s each host must feed (against a loader rate you measured with
``python tools/bench.py loader``, if given); the collectives by kind with their bytes per
step. Exit status 1 when it does not fit. Kept thin: :func:`zhlm.train.plan.compile_plan`
does the work.
"""

import json
import os
import sys

# A plan compiles for the TPU named on the command line; this host's own JAX backend only
# traces, so keep it on the CPU (libtpu would otherwise look for a local TPU).
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from zhlm.cli import failures, usage  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe config file.", lock_config=True)
_TOPOLOGY = flags.DEFINE_string("topology", None, "Cloud TPU accelerator type, e.g. v5litepod-16.")
_SLICES = flags.DEFINE_integer("num_slices", 1, "Slices joined over DCN (multi-slice).")
_FIND = flags.DEFINE_bool("find_batch", False, "Find the largest per-chip batch that fits.")
_JSON = flags.DEFINE_string("json", None, "Write the whole plan to this JSON file.")
_LOADER = flags.DEFINE_float(
    "loader_records_per_second",
    None,
    "Records/s of one loader process (python tools/bench.py loader): says whether one "
    "process per host keeps up.",
)
flags.mark_flags_as_required(["config", "topology"])


def _gb(n):
    return f"{n / 1e9:7.2f} GB"


def _memory_lines(p):
    m = p["memory"]
    other = m["total_bytes"] - m["temp_bytes"] - m["state_bytes"] - m["batch_bytes"]
    verdict = "fits" if m["fits"] else "DOES NOT FIT"
    return [
        f"memory per chip ({verdict} in {m['hbm_bytes'] / 1e9:.1f} GB HBM, 95% usable):",
        f"  parameters + optimizer state {_gb(m['state_bytes'])}",
        f"  batch                        {_gb(m['batch_bytes'])}",
        f"  temporaries                  {_gb(m['temp_bytes'])}",
        f"  program and the rest         {_gb(other)}",
        f"  total                        {_gb(m['total_bytes'])}",
    ]


def _speed_lines(p):
    f, t = p["flops"], p["time"]
    ratio = f["flops"] / f["model_flops"] if f["model_flops"] else float("nan")
    return [
        f"FLOPs per chip per step: {f['flops'] / 1e12:.3f} T compiled "
        f"({ratio:.3f}x zhlm's MFU count {f['model_flops'] / 1e12:.3f} T; one chip's step "
        f"{f['step_cost_analysis_flops'] / 1e12:.3f} T + {f['applications'] - 1} more "
        f"layer applications x {f['layer_flops'] / 1e12:.4f} T)",
        f"roofline step time: {t['step_seconds'] * 1e3:.2f} ms ({t['bound']}-bound: compute "
        f"{t['compute_seconds'] * 1e3:.2f} ms, HBM {t['hbm_seconds'] * 1e3:.2f} ms"
        + (f", ICI {t['ici_seconds'] * 1e3:.2f} ms)" if t["ici_seconds"] is not None else ")"),
        f"  at best {t['sequences_per_second']:,.0f} sequences/s, "
        f"{t['tokens_per_second']:,.0f} tokens/s, MFU {t['mfu']:.1%} (a bound from XLA's "
        "FLOP and bytes-accessed estimates, all overlapped; real steps are slower);",
        f"  MFU {t['mfu_without_hbm']:.1%} if HBM traffic were no limit (XLA's bytes accessed "
        "overstates it)",
    ]


def _host_lines(p):
    h = p["host"]
    lines = [
        f"host: {h['hosts']} host(s) of {h['chips_per_host']} chip(s); each must feed "
        f"{h['sequences_per_second_per_host']:,.0f} sequences/s at the roofline rate "
        f"({h['full_host_sequences_per_second']:,.0f} for a full host of "
        f"{h['full_host_chips']} chips)"
    ]
    rate = h["loader_records_per_second"]
    if rate is not None:
        verdict = "suffices" if h["one_process_suffices"] else "does NOT suffice"
        full = "suffices" if h["full_host_one_process_suffices"] else "does not"
        lines.append(
            f"  one loader process at {rate:,.0f} records/s {verdict} (for a full host: {full})"
        )
    return lines


def _collective_lines(p):
    lines = ["collectives per step (per chip; bytes of each full buffer x executions):"]
    for kind, c in p["collectives"].items():
        if c["count"]:
            dcn = ""
            if p["num_slices"] > 1:
                dcn = f", {c['cross_slice_bytes'] / 1e6:.1f} MB across slices"
            lines.append(
                f"  {kind:18s} {c['count']:5d} executions ({c['in_loop']} instructions in loops), "
                f"{c['bytes'] / 1e6:9.1f} MB{dcn}"
            )
    return lines


def format_plan(p) -> str:
    slices = f" x {p['num_slices']} slices" if p["num_slices"] > 1 else ""
    head = (
        f"{p['recipe']}:{p['size']} on {p['topology']} ({p['topology_name']}{slices}, "
        f"{p['chips']} chips, mesh {p['mesh']}): batch {p['batch_size']} x seq {p['seq_len']}"
        f" in {p['micro_batches']} micro-batch(es), {p['dtype']}, remat {p['remat']}; "
        f"compiled in {p['compile_seconds']:.0f} s"
    )
    body = [*_memory_lines(p), *_speed_lines(p), *_host_lines(p), *_collective_lines(p)]
    return "\n".join([head, *body])


def _write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    config, topology, slices = _CONFIG.value, _TOPOLOGY.value, _SLICES.value
    rate = _LOADER.value
    with failures.one_line("zhlm-compile"):
        from zhlm.train import plan

        if _FIND.value:
            found = plan.find_batch(config, topology, slices, loader_records_per_second=rate)
            capped = found["per_chip"] == found["limit"]  # larger is more than the batch has
            whole = " (the batch's whole share per chip)" if capped else ""
            print(f"largest per-chip micro-batch that fits: {found['per_chip']}{whole}")
            if found["plan"] is None:
                sys.exit(f"zhlm-compile: batch {config.train.batch_size} cannot be reached")
            print(
                f"global batch {config.train.batch_size}: --config.train.micro_batches="
                f"{found['micro_batches']}"
            )
            result = found["plan"]
        else:
            result = plan.compile_plan(config, topology, slices, rate)
    print(format_plan(result))
    if _JSON.value:
        _write_json(_JSON.value, result)
    if not result["memory"]["fits"]:
        sys.exit(1)


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
