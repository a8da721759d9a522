"""Benchmarks that print figures and ratios measured in the same run (never absolute claims).

  python tools/bench.py masking [--batch 32] [--seq 128 512] [--model-size base]
  python tools/bench.py prepare [--mb 0] [--recipe bert] [--processes 1 2] [--rounds 2]
  python tools/bench.py train [--cases tiny-fp32 base-fp32 base-bf16]   (tools/bench_train.py)

Each subcommand is one function registered in ``COMMANDS``; add new ones the same way.

``masking``: the cost of ``zhlm.masking.mask_batch`` per sequence for every scheme at each
sequence length, and its share of a train step (forward, backward and AdamW update of the
``--model-size`` model, masking included) measured on the same machine and batch. The batch is
synthetic but shaped like Chinese text (words of 1-4 tokens, entities, phrases, similar ids):
masking's cost depends on shapes, not on which tokens are there.
"""

import argparse
import sys
import time

import bench_train  # tools/ is the script's directory
import jax
import jax.numpy as jnp
import numpy as np

SCHEMES = ("token", "whole_word", "ngram", "knowledge", "span", "correction")


def _timeit(fn, *args, reps):
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def synthetic_batch(batch, seq_len, seed=0):
    """Segment pairs [CLS] A [SEP] B [SEP] with jieba-like words, entities and phrases."""
    rng = np.random.default_rng(seed)
    f = {k: np.full((batch, seq_len), -1, np.int32) for k in ("word_ids", "phrase_ids")}
    f["entity_ids"] = np.full((batch, seq_len), -1, np.int32)
    f["input_ids"] = rng.integers(106, 21128, (batch, seq_len)).astype(np.int32)
    f["similar_ids"] = rng.integers(106, 21128, (batch, seq_len)).astype(np.int32)
    f["token_type_ids"] = np.zeros((batch, seq_len), np.int32)
    f["attention_mask"] = np.ones((batch, seq_len), np.int32)
    for b in range(batch):
        lengths = rng.choice([1, 2, 3, 4], size=seq_len, p=[0.45, 0.45, 0.07, 0.03])
        word = np.repeat(np.arange(seq_len), lengths)[: seq_len - 3]
        cut = int(rng.integers(10, seq_len - 10))
        row = np.concatenate([[-1], word[: cut - 1], [-1], word[cut - 1 :], [-1]])
        f["word_ids"][b] = row
        f["input_ids"][b, row < 0] = 102
        f["input_ids"][b, 0] = 101
        f["token_type_ids"][b, cut:] = 1
        unit = np.where(row >= 0, row // 3, -1)  # phrases: runs of about three words
        f["phrase_ids"][b] = np.where(rng.random(seq_len)[np.maximum(unit, 0)] < 0.3, unit, -1)
        f["entity_ids"][b] = np.where(rng.random(seq_len)[np.maximum(row, 0)] < 0.07, row, -1)
    f["sentence_label"] = rng.integers(2, size=batch).astype(np.int32)
    return {k: jnp.asarray(v) for k, v in f.items()}


def _config(scheme, seq_len, size):
    from zhlm import defaults

    c = defaults.get_base_config()
    c.model.size = size
    c.masking.scheme = scheme
    c.masking.replacement = "mac" if scheme == "correction" else "partial_mask"
    c.masking.max_predictions_per_seq = int(round(0.15 * seq_len))
    c.data.max_seq_length = seq_len
    return c


def _train_step(config, batch, with_masking):
    """A BERT pretraining step (masking -> model -> loss -> grads -> AdamW), jitted."""
    import optax

    from zhlm import masking, objectives
    from zhlm.models import build_model

    model = build_model(config)
    ids = batch["input_ids"]
    variables = model.init(jax.random.key(0), ids, batch["token_type_ids"], batch["attention_mask"])
    opt = optax.adamw(1e-4)
    state = (variables["params"], opt.init(variables["params"]))
    fixed = masking.mask_batch(batch, jax.random.key(1), config)  # for the step without masking

    def step(state, batch, rng):
        params, opt_state = state
        m = masking.mask_batch(batch, rng, config) if with_masking else {**batch, **fixed}
        span = {k: m[k] for k in ("span_left", "span_right", "span_offset") if k in m}

        def loss_fn(p):
            out = model.apply(
                {**variables, "params": p},
                m["input_ids"],
                m["token_type_ids"],
                m["attention_mask"],
                masked_positions=m["masked_positions"],
                deterministic=False,
                rngs={"dropout": rng},
                **span,
            )
            return objectives.pretraining_loss(out, m)[0]

        grads = jax.grad(loss_fn)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return jax.jit(step), state


def masking_bench(args):
    from zhlm import masking

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, batch {args.batch}")
    print("\n| scheme | " + " | ".join(f"us/seq @{s}" for s in args.seq) + " |")
    print("|---|" + "---|" * len(args.seq))
    cost = {}
    for scheme in SCHEMES:
        row = []
        for s in args.seq:
            batch = synthetic_batch(args.batch, s)
            c = _config(scheme, s, args.model_size)
            f = jax.jit(lambda b, k, c=c: masking.mask_batch(b, k, c))
            t = _timeit(f, batch, jax.random.key(0), reps=args.reps)
            cost[scheme, s] = t
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
        c = _config(scheme, s, args.model_size)
        timed = {}
        for with_masking in (True, False):
            step, state = _train_step(c, batch, with_masking)
            timed[with_masking] = _timeit(step, state, batch, jax.random.key(2), reps=args.reps)
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

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from ablations import load_module

    from zhlm.data import builder, pipeline, words

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    data = os.path.join(root, "..", "shared", "data", "corpus")
    recipe = load_module(os.path.join(root, "configs", f"{args.recipe}.py"), args.recipe)
    config = recipe.get_config("tiny")
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
            pipeline._ANNOTATORS.clear()
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


COMMANDS = {
    "masking": masking_bench,
    "prepare": prepare_bench,
    "train": bench_train.run,
    "train-worker": bench_train.worker,
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
    args = parser.parse_args(argv)
    COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
