"""``python tools/bench.py predict``: zhlm-predict's peak memory and rate at two file sizes
(``--peers``: against transformers.pipeline and ONNX Runtime, ``tools/bench_predict_peers.py``).

What it shows: whether prediction memory is bounded by the chunk, not by the file. A tiny
classification model (random weights: what is measured is reading, featurizing, the forward
pass and writing, not accuracy) is saved the way zhlm-finetune saves ``best/``; input files of
``--lines`` lines each (ChnSentiCorp reviews repeated, a ``text_a`` header) are predicted by
``zhlm-predict`` in a child process of its own, and each child's peak RSS (``os.wait4``'s
``ru_maxrss``: that child's alone) and records/s are printed with the ratio of the largest
size's peak to the smallest's (flat is about 1.0).

records/s is end to end (start-up, JAX import and compile included); the marginal rate
between the two sizes is the steady state.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "..", "shared", "data")


def tiny_workdir(path: str, config) -> str:
    """A fine-tuning workdir at ``path`` whose ``best/`` holds a random model of ``config`` (its
    ``task``: kind, labels, lengths) with Google's vocabulary, as zhlm-finetune leaves one."""
    import jax

    from zhlm import run_files
    from zhlm.data.tokenizer import default_vocab
    from zhlm.finetune import kinds, saved
    from zhlm.train.checkpoint import VOCAB

    model = kinds.task_model(config)
    inputs = kinds.get(config.task.kind).example_inputs(config.task)
    params = saved.init_params(model, jax.random.key(0), inputs)
    best = saved.save_finetuned(os.path.join(path, run_files.BEST), params, config)
    shutil.copyfile(default_vocab(), os.path.join(best, VOCAB))
    return path


def classifier_config(seq: int, size: str = "tiny"):
    """The ChnSentiCorp config of a ``size`` model at ``seq`` tokens."""
    from zhlm import config_files

    config = config_files.load(os.path.join(ROOT, "configs", "finetune", "chnsenticorp.py"), size)
    config.task.max_seq_length = seq
    return config


def input_file(path: str, lines: int) -> str:
    """``lines`` ChnSentiCorp training reviews under a ``text_a`` header, repeated as needed."""
    with open(os.path.join(DATA, "chnsenticorp", "train.tsv"), encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t", 1)[1] for line in list(f)[1:]]
    with open(path, "w", encoding="utf-8") as f:
        f.write("text_a\n")
        for i in range(lines):
            f.write(texts[i % len(texts)] + "\n")
    return path


def measure(workdir: str, inputs: str, output: str) -> dict:
    """One zhlm-predict child: its peak RSS in MB, wall seconds and records written."""
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={workdir}"]
    cmd += [f"--input={inputs}", f"--output={output}"]
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    start = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    out, err = child.stdout.read().decode(), child.stderr.read().decode()
    if child.returncode:
        raise SystemExit(f"zhlm-predict failed ({child.returncode}):\n{out}\n{err[-3000:]}")
    with open(output, "rb") as f:
        records = sum(1 for _ in f)
    return dict(peak_mb=usage.ru_maxrss / 1024, seconds=seconds, records=records)


def run(args):
    if args.peers:
        import bench_predict_peers

        return bench_predict_peers.run(args)
    tmp = tempfile.mkdtemp(prefix="zhlm-bench-predict-")
    try:
        workdir = tiny_workdir(os.path.join(tmp, "cs"), classifier_config(args.seq))
        print(f"tiny classifier, max_seq_length {args.seq}, {os.cpu_count()} CPUs", flush=True)
        print("\n| input lines | peak RSS MB | seconds | records/s (end to end) |")
        print("|---|---|---|---|")
        rows = {}
        for lines in args.lines or (2000, 200000):
            inputs = input_file(os.path.join(tmp, f"in{lines}.tsv"), lines)
            r = rows[lines] = measure(workdir, inputs, os.path.join(tmp, f"out{lines}.jsonl"))
            if r["records"] != lines:
                raise SystemExit(f"{lines} input lines gave {r['records']} records")
            os.remove(inputs)
            rate = r["records"] / r["seconds"]
            print(
                f"| {lines:,} | {r['peak_mb']:.0f} | {r['seconds']:.1f} | {rate:,.0f} |", flush=True
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    small, large = rows[min(rows)], rows[max(rows)]
    ratio = large["peak_mb"] / small["peak_mb"]
    print(f"\npeak RSS {max(rows):,} / {min(rows):,} lines: {ratio:.2f}x")
    if len(rows) > 1:
        extra = large["records"] - small["records"]
        marginal = extra / max(large["seconds"] - small["seconds"], 1e-9)
        print(f"marginal rate between them (start-up excluded): {marginal:,.0f} records/s")


def add_parser(sub):
    p = sub.add_parser("predict", help="zhlm-predict peak RSS and records/s at two file sizes")
    p.add_argument(
        "--lines", type=int, nargs="+", help="input sizes (default 2000 200000; --peers: 1024)"
    )
    p.add_argument("--seq", type=int, default=128, help="the model's max_seq_length")
    p.add_argument(
        "--peers",
        action="store_true",
        help="against transformers.pipeline and ONNX Runtime (tools/bench_predict_peers.py; "
        "--lines: its first size, 1024 if not given)",
    )
    p.add_argument("--size", default="tiny", help="--peers: the model size")
    p.add_argument("--batch", type=int, default=32, help="--peers: inputs per batch")
    p.add_argument("--reps", type=int, default=3, help="--peers: timed rounds (medians)")
