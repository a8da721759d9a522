"""``python tools/bench.py train``: zhlm's pretraining step beside Hugging Face's, same run.

Peer: transformers' PyTorch ``BertForPreTraining`` (MLM + NSP, AdamW), same dims, batch, number
of masked tokens and threads. Each side runs in its own child process, one after the other, so
neither competes for the cores and each one's peak RSS is its own; the sides alternate for
``--rounds`` rounds and each keeps its fastest (the same machine drifts by 30% over minutes
here, which a single A-then-B pair turns into a false ratio). Printed:

- tokens/s of both and the ratio for L2/H128 32x128 fp32, L12/H768 8x128 fp32, and the same
  base model in bf16 (zhlm ``model.dtype=bfloat16``, fp32 master weights; the peer under
  ``torch.autocast(bfloat16)``);
- MFU of the base fp32 step against the fp32 matmul peak that JAX reaches on this machine
  (a large square matmul, measured in the same run), with the FLOP count of
  ``zhlm.train.metrics.train_flops_per_sequence``;
- XLA compile time of the step with 24 layers against 2 layers (the scan keeps it flat);
- peak resident memory of each child.

On a GPU the same command measures the GPU cases instead (``GPU_CASES``: BERT-base and
BERT-large, 32 sequences of 512 tokens, bf16 compute; the peer under CUDA autocast on the same
GPU) and prints both sides' MFU against the GPU's dense bf16 peak
(``zhlm.train.metrics.PEAK_FLOPS``); ``tools/gpu_bench.sh`` is that run as one prepared script.

zhlm's step is the real one (``make_trainer``: masking on device, the model, the objectives,
AdamW with BERT's schedule and clipping). The peer's labels mark the same number of positions
(``max_predictions_per_seq``); like every HF BERT it still computes logits at every position.
"""

import json
import os
import resource
import time

import bench_common  # tools/, the script's directory

CASES = {
    "tiny-fp32": dict(size="tiny", batch=32, seq=128, dtype="float32"),
    "base-fp32": dict(size="base", batch=8, seq=128, dtype="float32"),
    "base-bf16": dict(size="base", batch=8, seq=128, dtype="bfloat16"),
    "base-bf16-512": dict(size="base", batch=32, seq=512, dtype="bfloat16"),
    "large-bf16-512": dict(size="large", batch=32, seq=512, dtype="bfloat16"),
}
CPU_CASES = ("tiny-fp32", "base-fp32", "base-bf16")
GPU_CASES = ("base-bf16-512", "large-bf16-512")


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _jax_worker(case, reps):
    from zhlm.data.synthetic import synthetic_batch
    from zhlm.train.step import make_trainer

    c = bench_common.config(**case)
    trainer = make_trainer(c)
    sec = bench_common.step_seconds(trainer, synthetic_batch(case["batch"], case["seq"]), reps)
    return dict(seconds=sec, flops_per_second=_step_flops(case) / sec)


def _step_flops(case):
    """Model FLOPs of one step of ``case`` (zhlm.train.metrics' count, the same for both sides)."""
    from zhlm.models import model_config
    from zhlm.train import metrics

    c = bench_common.config(**case)
    per_sequence = metrics.train_flops_per_sequence(
        model_config(c.model), case["seq"], c.masking.max_predictions_per_seq
    )
    return case["batch"] * per_sequence


def _device_info():
    import jax

    from zhlm.train import metrics

    device = jax.devices()[0]
    kind = device.device_kind
    return dict(platform=device.platform, kind=kind, peak=metrics.PEAK_FLOPS.get(kind, 0.0))


def _torch_worker(case, reps):
    import torch
    import transformers

    from zhlm.models import SIZES

    torch.set_num_threads(os.cpu_count())
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dims = SIZES[case["size"]]
    h = dims["hidden_size"]
    cfg = transformers.BertConfig(
        vocab_size=21128,
        hidden_size=h,
        num_hidden_layers=dims["num_layers"],
        num_attention_heads=dims["num_heads"],
        intermediate_size=4 * h,
    )
    model = transformers.BertForPreTraining(cfg).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=1e-6, weight_decay=0.01)
    b, s = case["batch"], case["seq"]
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(672, 21128, (b, s), generator=g)
    labels = torch.full((b, s), -100)
    for row in range(b):
        pos = torch.randperm(s - 2, generator=g)[: round(0.15 * s)] + 1
        labels[row, pos] = ids[row, pos]
    types = torch.zeros((b, s), dtype=torch.long)
    types[:, s // 2 :] = 1
    nsp = torch.randint(0, 2, (b,), generator=g)
    ids, types, labels, nsp = (t.to(device) for t in (ids, types, labels, nsp))
    autocast = case["dtype"] == "bfloat16"

    def step():
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            out = model(input_ids=ids, token_type_ids=types, labels=labels, next_sentence_label=nsp)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":  # the timer must see the kernels finish, as JAX's block_until_ready
            torch.cuda.synchronize()

    return dict(seconds=bench_common.median_seconds(step, reps, warmup=2))


def _matmul_peak(n=2048, reps=5):
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    return 2 * n**3 / bench_common.median_seconds(lambda: jax.block_until_ready(f(a)), reps)


def _compile_seconds(layers):
    import flax.linen as nn
    import jax

    from zhlm.data.synthetic import synthetic_batch
    from zhlm.train import sharding
    from zhlm.train.step import make_trainer

    trainer = make_trainer(bench_common.config("tiny", 8, 128, "float32", layers=layers))
    state = trainer.abstract_state()
    batch = synthetic_batch(8, 128)
    t = time.perf_counter()
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(sharding.rules(trainer.config)):
        trainer.step_fn.lower(state, batch, jax.random.key(0)).compile()
    return time.perf_counter() - t


def worker(args):
    """One measurement in this process; prints one JSON line. A JAX measurement runs in a
    process set up as zhlm's programs set theirs up (``zhlm.cli.settle_process``: platform,
    host memory); the peer's as PyTorch's default."""
    if args.what != "torch":
        from zhlm import cli

        cli.settle_process()
    if args.what == "jax":
        out = _jax_worker(CASES[args.case], args.reps)
    elif args.what == "torch":
        out = _torch_worker(CASES[args.case], args.reps)
    elif args.what == "peak":
        out = dict(flops_per_second=_matmul_peak())
    elif args.what == "info":
        out = _device_info()
    else:
        out = dict(seconds=_compile_seconds(int(args.what.split("-")[1])))
    out["max_rss_mb"] = _rss_mb()
    print("RESULT" + json.dumps(out), flush=True)


def _child(what, case="", reps=5, timeout=None):
    """One worker's JSON result; ``None`` when it ran past ``timeout`` seconds."""
    args = ["train-worker", what, *(["--case", case, "--reps", reps] if case else [])]
    return bench_common.worker_result(args, timeout)


def _best(runs):
    done = [r for r in runs if r is not None]
    return min(done, key=lambda r: r["seconds"]) if done else None


def _rounds(name, args):
    """Both sides ``args.rounds`` times, alternating, each side's fastest run kept: on a shared
    machine other work only ever slows a run down, and alternating spreads its bursts evenly."""
    ours, peer = [], []
    for _ in range(args.rounds):
        ours.append(_child("jax", name, args.reps))
        if not peer or peer[-1] is not None:  # a peer that timed out is not run again
            peer.append(_child("torch", name, args.reps, timeout=args.peer_timeout))
    return _best(ours), _best(peer)


def run(args):
    import jax

    # The backend is only ever started in the children: on a GPU, a parent holding the device
    # (JAX takes most of its memory up front) would leave the children none.
    info = _child("info")
    gpu = info["platform"] == "gpu"
    cases = args.cases or (GPU_CASES if gpu else CPU_CASES)
    print(
        f"jax {jax.__version__}, {os.cpu_count()} CPU threads, device {info['kind']} "
        f"({info['platform']}); peer: transformers PyTorch on the same device"
    )
    if gpu:
        peak = info["peak"]
        known = f"{peak / 1e12:.1f} TFLOP/s" if peak else "unknown: no MFU (set PEAK_FLOPS)"
        print(f"dense bf16 peak of {info['kind']}: {known}")
    print("\n| case | zhlm tokens/s | HF tokens/s | ratio | zhlm peak RSS MB | HF peak RSS MB |")
    print("|---|---|---|---|---|---|")
    results, peers = {}, {}
    for name in cases:
        case = CASES[name]
        ours, peer = _rounds(name, args)
        results[name], peers[name] = ours, peer
        tokens = case["batch"] * case["seq"]
        if peer is None:  # e.g. bf16 autocast on a CPU without native bf16 matmuls
            hf, ratio, hf_rss = f"(> {args.peer_timeout} s, stopped)", "n/a", "n/a"
        else:
            hf = f"{tokens / peer['seconds']:,.0f}"
            ratio = f"{peer['seconds'] / ours['seconds']:.2f}x"
            hf_rss = f"{peer['max_rss_mb']:,.0f}"
        print(
            f"| {name} {case['batch']}x{case['seq']} | {tokens / ours['seconds']:,.0f} | {hf} | "
            f"{ratio} | {ours['max_rss_mb']:,.0f} | {hf_rss} |",
            flush=True,
        )
    if gpu and info["peak"]:
        _print_gpu_mfu(cases, results, peers, info["peak"])
    if "base-fp32" in results:
        peak = max(_child("peak")["flops_per_second"] for _ in range(args.rounds))
        mfu = results["base-fp32"]["flops_per_second"] / peak
        print(
            f"\nbase fp32 step: {results['base-fp32']['flops_per_second'] / 1e9:.1f} GFLOP/s of "
            f"model FLOPs; fp32 matmul peak here {peak / 1e9:.1f} GFLOP/s; MFU {100 * mfu:.0f}%"
        )
    c2, c24 = _child("compile-2")["seconds"], _child("compile-24")["seconds"]
    print(f"compile of the step: 2 layers {c2:.1f} s, 24 layers {c24:.1f} s, ratio {c24 / c2:.2f}")


def _print_gpu_mfu(cases, results, peers, peak):
    """Model FLOPs per second of each side over the GPU's dense bf16 peak (fp32 cases count
    against the same peak: what the chip offers, not what the dtype can reach)."""
    print("\n| case | zhlm MFU | HF MFU |")
    print("|---|---|---|")
    for name in cases:
        flops = _step_flops(CASES[name])
        hf = peers[name]
        hf_mfu = f"{100 * flops / hf['seconds'] / peak:.1f}%" if hf else "n/a"
        print(f"| {name} | {100 * flops / results[name]['seconds'] / peak:.1f}% | {hf_mfu} |")


def add_parsers(sub):
    p = sub.add_parser("train", help="train step tokens/s, MFU, compile time vs HF PyTorch")
    p.add_argument(
        "--cases", nargs="+", choices=list(CASES), help="default: CPU_CASES, or GPU_CASES on a GPU"
    )
    p.add_argument("--reps", type=int, default=5, help="timed steps per side (median)")
    p.add_argument("--peer-timeout", type=int, default=900, help="seconds before giving up on HF")
    p.add_argument("--rounds", type=int, default=2, help="alternating runs per side (fastest kept)")
    w = sub.add_parser("train-worker", help="(internal) one measurement of `train`")
    w.add_argument("what", help="jax, torch, peak, compile-N")
    w.add_argument("--case", default="")
    w.add_argument("--reps", type=int, default=5)
