"""Benchmarks that print figures and ratios measured in the same run (never absolute claims).

  python tools/bench.py masking [--batch 32] [--seq 128 512] [--model-size base]
  python tools/bench.py prepare [--mb 0] [--recipe bert] [--processes 1 2] [--rounds 2]
  python tools/bench.py train [--cases tiny-fp32 base-fp32 base-bf16]   (tools/bench_train.py;
                                 on a GPU: base-bf16-512 large-bf16-512, tools/gpu_bench.sh)
  python tools/bench.py loader [--recipe macbert] [--seq 128] [--read-ahead 0 4]
  python tools/bench.py tpu [--generations v5litepod v6e] [--runs 0 2] [--no-parts] [--quick]
  python tools/bench.py predict [--lines 2000 200000] [--seq 128]   (tools/bench_predict.py)
  python tools/bench.py predict --peers [--size tiny] [--lines 1024] [--seq 128] [--batch 32]
                                 (tools/bench_predict_peers.py: against transformers.pipeline
                                 and ONNX Runtime, whole process and in memory)
  python tools/bench.py finetune [--tasks chnsenticorp lcqmc msra_ner] [--size tiny]
                                 (tools/bench_finetune.py: zhlm against HF PyTorch fine-tuning)
  python tools/bench.py tokens [--recipes bert ernie] [--seq 128 512] [--corpus FILE]
                               [--tasks lcqmc msra_ner]  (tools/bench_tokens.py: real-token
                                 share of pretraining records and of fine-tuning batches)

Each subcommand is one function registered in ``COMMANDS``; add new ones the same way.

``masking``: the cost of ``zhlm.masking.mask_batch`` per sequence for every scheme at each
sequence length, and its share of the real train step (``zhlm.train.step.make_trainer`` of the
``--model-size`` model: masking, forward and backward with dropout, gradient clipping and AdamW
with BERT's schedule), timed on the same machine and batch once with fresh masks every step and
once with masks drawn once before (``make_trainer``'s ``mask_fn``). The batch is
``zhlm.data.synthetic.synthetic_batch``, with Chinese word lengths: masking's cost depends on
shapes, not on which tokens are there.

``loader``: records/s of one process reading ``zhlm.data.loader.Loader`` batches (a whole
host's rows of each global batch) from a dataset prepared here with zhlm-prepare's code,
synchronously and with read-ahead threads, in the same run.

``tpu``: the papers' runs planned on Cloud TPU slices (``tools/tpu_plan.py``: the step
compiled by libtpu here, no TPU) against the loader rate measured in the same run, and what
each part of the BERT-base step costs on one generation (each part switched off or compiled
alone; ``tools/tpu_parts.py``). Compiles take minutes; plans are cached in ``--workdir``.
"""

import argparse
import os
import sys
import time

# tpu compiles for a TPU it does not have (this host only traces); predict measures host memory.
if sys.argv[1:2] in (["tpu"], ["predict"], ["tokens"]):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

import bench_common  # tools/ is the script's directory
import bench_finetune
import bench_predict
import bench_tokens
import bench_train
import jax

SCHEMES = ("token", "whole_word", "ngram", "knowledge", "span", "correction")


def _masking_seconds(config, batch, reps):
    """Median seconds of the jitted ``mask_batch`` on ``batch``, already on the device."""
    from zhlm import masking

    f, key = jax.jit(lambda b, k: masking.mask_batch(b, k, config)), jax.random.key(0)
    return bench_common.median_seconds(lambda: jax.block_until_ready(f(batch, key)), reps)


def _step_seconds(config, batch, reps):
    """The real step with fresh masks and with masks fixed before: ``{True: s, False: s}``."""
    from zhlm import masking
    from zhlm.train.step import make_trainer

    fixed = masking.mask_batch(batch, jax.random.key(1), config)
    timed = {}
    for with_masking, mask_fn in (
        (True, masking.mask_batch),
        (False, lambda batch, rng, config: {**batch, **fixed}),
    ):
        trainer = make_trainer(config, mask_fn=mask_fn)
        timed[with_masking] = bench_common.step_seconds(trainer, batch, reps, warmup=1)
    return timed


def masking_bench(args):
    from zhlm.data.synthetic import synthetic_batch

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, batch {args.batch}")
    print("\n| scheme | " + " | ".join(f"us/seq @{s}" for s in args.seq) + " |")
    print("|---|" + "---|" * len(args.seq))
    cost = {}
    for scheme in SCHEMES:
        row = []
        for s in args.seq:
            batch = jax.device_put(synthetic_batch(args.batch, s))
            c = bench_common.config(args.model_size, args.batch, s, scheme=scheme)
            cost[scheme, s] = t = _masking_seconds(c, batch, args.reps)
            row.append(f"{1e6 * t / args.batch:.1f}")
        print(f"| {scheme} | " + " | ".join(row) + " |")
    if args.no_step:
        return
    s = args.step_seq
    print(f"\nshare of a {args.model_size} train step (seq {s}, batch {args.batch}, same run):")
    print("| scheme | masking ms | step ms (with masking) | step ms (masks fixed) | share |")
    print("|---|---|---|---|---|")
    batch = synthetic_batch(args.batch, s)
    for scheme in args.step_schemes:
        c = bench_common.config(args.model_size, args.batch, s, scheme=scheme)
        timed = _step_seconds(c, batch, args.reps)
        share = cost[scheme, s] / timed[True]
        print(
            f"| {scheme} | {1e3 * cost[scheme, s]:.1f} | {1e3 * timed[True]:.0f} | "
            f"{1e3 * timed[False]:.0f} | {100 * share:.2f}% |"
        )


def prepare_bench(args):
    """``prepare``: MB/s of raw text through zhlm-prepare (read, clean, split, tokenise, word
    segmentation, instances, TFDS ArrayRecord), for 1 and 2 processes, beside jieba alone (the
    Python package, its default HMM on) on the same text."""
    import atexit
    import os
    import shutil
    import tempfile

    from zhlm import config_files
    from zhlm.data import builder, pipeline, words

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    data = os.path.join(root, "..", "shared", "data", "corpus")
    config = config_files.load(args.recipe, "tiny")
    config.data.shard_mb = args.shard_mb
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    tmp = tempfile.mkdtemp(prefix="zhlm-bench-")
    atexit.register(shutil.rmtree, tmp, True)
    half = int(args.mb * 2**20 / 2) if args.mb else -1  # -1: all of both corpora
    with open(os.path.join(data, "clue_small_docs.txt"), "rb") as f:
        clue = f.read(half)
    clue = clue[: clue.rfind(b"\n\n") + 2]  # whole documents only
    pd_lines = []
    with open(os.path.join(data, "peoples_daily_199801_pos.txt"), encoding="utf-8") as f:
        size = 0
        for line in f:  # gold tags stripped; one paragraph = one document
            t = "".join(w for w, _ in words.parse_gold(line))
            pd_lines.append(t + "\n\n")
            size += len(t.encode()) + 2
            if 0 <= half <= size:
                break
    inputs = {"clue.txt": clue, "pd.txt": "".join(pd_lines).encode()}
    for name, raw in inputs.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(raw)
    total = sum(map(len, inputs.values())) / 2**20
    print(
        f"input {total:.2f} MB ({args.recipe}, {config.data.format}, shards of {args.shard_mb} MB)"
    )
    # The process counts take turns for --rounds (this machine's speed drifts by tens of
    # percent over minutes); each count keeps its fastest run. Every run loads the tokenizer,
    # jieba and lexicons afresh, as zhlm-prepare does (1 process would reuse this process's).
    best = {}
    for r in range(args.rounds):
        for n in args.processes if r % 2 == 0 else args.processes[::-1]:
            pipeline.reset_annotators()
            t = time.perf_counter()
            builder.prepare(
                config.data,
                config.recipe,
                [os.path.join(tmp, "*.txt")],
                os.path.join(tmp, f"tfds{n}-{r}"),
                num_processes=n,
                progress=False,
            )
            best[n] = min(best.get(n, float("inf")), time.perf_counter() - t)
    # After the runs: jieba's dictionary in this process slowed the 2-process run by 6%.
    import jieba

    jieba.setLogLevel(60)
    lines = b"".join(inputs.values()).decode().splitlines()
    rates = {}
    for name, cut in (("jieba", jieba.lcut), ("zhlm word segmenter", words.Segmenter().cut)):
        cut(lines[0])  # loads the dictionary
        t = time.perf_counter()
        for line in lines:
            cut(line)
        rates[name] = total / (time.perf_counter() - t)
    jieba_mbs = rates["jieba"]
    print("\n| processes | seconds | MB/s | MB/s per process | vs 1 process | vs jieba alone |")
    print("|---|---|---|---|---|---|")
    base = None
    for n in args.processes:
        mbs = total / best[n]
        base = base or mbs
        print(
            f"| {n} | {best[n]:.1f} | {mbs:.2f} | {mbs / n:.2f} | {mbs / base:.2f}x | "
            f"{mbs / n / jieba_mbs:.2f} |"
        )
    print(
        f"\njieba.cut alone, 1 process, same text: {jieba_mbs:.2f} MB/s; zhlm's word segmenter "
        f"(rjieba, no HMM): {rates['zhlm word segmenter']:.2f} MB/s"
    )


def add_prepare_parser(sub):
    p = sub.add_parser("prepare", help="zhlm-prepare throughput (MB/s) for 1 and 2 processes")
    p.add_argument(
        "--mb", type=float, default=0, help="MB of raw text, half from each corpus (0: all, 7.2)"
    )
    p.add_argument("--recipe", default="bert", help="configs/<recipe>.py (its data format)")
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts")
    p.add_argument("--shard-mb", type=float, default=0.25, help="shard size (data.shard_mb)")
    p.add_argument("--rounds", type=int, default=2, help="alternating runs; fastest kept")


def loader_bench(args):
    """``loader``: one process's records/s, synchronous and with each read-ahead depth."""
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="zhlm-loader-")
    try:
        print("| recipe | seq | batch | read-ahead | records/s | vs synchronous |")
        print("|---|---|---|---|---|---|")
        base = None
        for depth in args.read_ahead:
            r = bench_common.loader_rate(
                args.recipe, args.seq, args.batch, args.input, args.seconds, tmp, depth
            )
            base = base or r["records_per_second"]
            print(
                f"| {args.recipe} | {args.seq} | {args.batch} | {depth or 'off'} | "
                f"{r['records_per_second']:,.0f} | {r['records_per_second'] / base:.2f}x |",
                flush=True,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{r['records']} records of fields {', '.join(r['fields'])}; {os.cpu_count()} CPUs")


def add_loader_parser(sub):
    p = sub.add_parser("loader", help="records/s of one loader process (the host's feed)")
    p.add_argument("--recipe", default="macbert", help="configs/<recipe>.py (its fields)")
    p.add_argument("--seq", type=int, default=128, help="sequence length")
    p.add_argument("--batch", type=int, default=256, help="global batch (one process: all rows)")
    p.add_argument("--input", nargs="*", default=[], help="text files (default: bundled sample)")
    p.add_argument("--seconds", type=float, default=5.0, help="timed seconds per setting")
    p.add_argument(
        "--read-ahead", type=int, nargs="+", default=[0, 4], help="batches read ahead (0: off)"
    )


def tpu_bench(args):
    """``tpu``: the plan table against the loader rate of this run, then the parts table."""
    import tpu_parts
    import tpu_plan
    import tpu_runs

    rate = args.loader_records_per_second
    if rate is None and not args.quick:
        rate = bench_common.loader_rate(read_ahead=args.read_ahead)["records_per_second"]
    runs = tpu_runs.QUICK_RUNS if args.quick else [tpu_runs.RUNS[i] for i in args.runs]
    cached = "stale" if args.stale else args.cached_only
    gens = args.generations or (("v5litepod",) if args.quick else tuple(tpu_runs.GENERATIONS))
    text = tpu_plan.table(runs, gens, args.workdir, rate, args.find_batch, cached_only=cached)
    print(text, flush=True)
    if not args.no_parts and not args.quick:
        extra = ("rbg",) if args.rbg else ()
        parts = tpu_parts.parts_table(
            args.parts_generation,
            args.parts_chips,
            extra=extra,
            workdir=args.workdir,
            cached_only=bool(cached),
        )
        print("\n" + parts)


def add_tpu_parser(sub):
    import tpu_plan
    import tpu_runs

    p = sub.add_parser("tpu", help="the papers' runs planned on Cloud TPU; cost of each part")
    p.add_argument("--workdir", default=tpu_plan.DEFAULT_WORKDIR, help="cache of compiled plans")
    p.add_argument(
        "--runs",
        type=int,
        nargs="+",
        default=list(range(len(tpu_runs.RUNS))),
        help="indices into tools/tpu_runs.py RUNS",
    )
    p.add_argument("--generations", nargs="+", choices=list(tpu_runs.GENERATIONS))
    p.add_argument("--loader_records_per_second", type=float, help="default: measured here")
    p.add_argument("--read-ahead", type=int, default=0, help="loader read-ahead when measuring")
    p.add_argument("--find_batch", action="store_true", help="plan.find_batch (many compiles)")
    p.add_argument("--quick", action="store_true", help="a tiny row on v5e only (tests)")
    p.add_argument("--cached_only", action="store_true", help="plans in --workdir only")
    p.add_argument("--stale", action="store_true", help="cached, older code's or compiler's too")
    p.add_argument("--no-parts", action="store_true", help="skip the per-part cost table")
    p.add_argument("--parts-generation", default="v5litepod", help="generation of the parts")
    p.add_argument("--parts-chips", type=int, default=8, help="chips of the parts' slice")
    p.add_argument("--rbg", action="store_true", help="parts: also dropout_rng=rbg")


COMMANDS = {
    "masking": masking_bench,
    "prepare": prepare_bench,
    "train": bench_train.run,
    "train-worker": bench_train.worker,
    "loader": loader_bench,
    "tpu": tpu_bench,
    "predict": bench_predict.run,
    "tokens": bench_tokens.run,
    "finetune": bench_finetune.run,
    "finetune-worker": bench_finetune.worker,
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("masking", help="masking cost per scheme and its share of a train step")
    m.add_argument("--batch", type=int, default=32, help="sequences per batch")
    m.add_argument("--seq", type=int, nargs="+", default=[128, 512], help="sequence lengths")
    m.add_argument("--reps", type=int, default=5, help="timed repetitions (median)")
    m.add_argument("--model-size", default="base", help="model size of the train step")
    m.add_argument("--step-seq", type=int, default=128, help="sequence length of the train step")
    m.add_argument(
        "--step-schemes", nargs="+", default=["token", "span"], help="schemes timed in a step"
    )
    m.add_argument("--no-step", action="store_true", help="only the masking table")
    add_prepare_parser(sub)
    bench_train.add_parsers(sub)
    add_loader_parser(sub)
    add_tpu_parser(sub)
    bench_predict.add_parser(sub)
    bench_tokens.add_parser(sub)
    bench_finetune.add_parsers(sub)
    args = parser.parse_args(argv)
    COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
