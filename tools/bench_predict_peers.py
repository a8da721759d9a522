"""``python tools/bench.py predict --peers``: zhlm against the runtimes a user would otherwise
pick to predict with the same exported model, each as a whole process and in memory.

  python tools/bench.py predict --peers [--size tiny] [--lines 1024] [--seq 128] [--batch 32]

What it runs: a random classifier of ``--size`` (ChnSentiCorp's task, random weights: what is
measured is the work, not accuracy) saved as zhlm-finetune saves ``best/`` and exported as a
Hugging Face folder (``zhlm.to_hf``), whose weights every runner reads; ``--lines``
ChnSentiCorp reviews; each input cut to ``--seq`` tokens, ``--batch`` at a time, on the CPU:

* ``transformers.pipeline`` (``text-classification``, ``truncation=True, max_length=SEQ``,
  ``batch_size=BATCH``: dynamic padding, each batch to its longest input);
* ONNX Runtime on the folder exported by ``torch.onnx.export`` (eager attention, batch and
  length dynamic), the folder's ``tokenizer.json`` through ``tokenizers``, batches of
  ``BATCH`` in input order padded to their longest input, softmax in NumPy;
* ``zhlm.pipeline(FOLDER, max_seq_length=SEQ, batch_size=BATCH)`` and ``zhlm-predict`` with the
  same flags (length buckets).

Each runner is a process of its own, timed whole (``python`` started to exit: imports, loading,
predicting, writing) and, inside, in memory (the call that predicts every input, after the
model is loaded). The runners take turns for ``--reps`` rounds, in an order that rotates, and
each keeps its median, after one untimed round that fills zhlm's compilation cache (a folder of
this run; its cold start is reported on its own line). Labels and probabilities are compared
across the runners. Ratios are the runner's seconds over zhlm's: above 1, zhlm is faster.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import bench_predict

RUNNERS = ("transformers.pipeline", "ONNX Runtime", "zhlm.pipeline", "zhlm-predict")

# The child programs: argv[1] folder, [2] inputs (a text a line), [3] output, [4] seq, [5] batch;
# each writes one JSON line a record (label, probabilities) and prints its in-memory seconds.
_READ = """
import json, sys, time
folder, inputs, output, seq, batch = sys.argv[1], sys.argv[2], sys.argv[3], *map(int, sys.argv[4:6])
texts = [line.rstrip("\\n") for line in open(inputs, encoding="utf-8")]
def write(records):
    with open(output, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\\n" for r in records)
"""
CHILDREN = {
    "transformers.pipeline": _READ
    + """
import transformers
classify = transformers.pipeline("text-classification", model=folder, device="cpu")
began = time.perf_counter()
scores = classify(texts, top_k=None, truncation=True, max_length=seq, batch_size=batch)
seconds = time.perf_counter() - began
write([{s["label"]: s["score"] for s in row} for row in scores])
print(seconds)
""",
    "ONNX Runtime": _READ
    + """
import numpy as np, onnxruntime, tokenizers
config = json.load(open(folder + "/config.json"))
labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
tokenizer = tokenizers.Tokenizer.from_file(folder + "/tokenizer.json")
tokenizer.enable_truncation(seq)
tokenizer.enable_padding()
session = onnxruntime.InferenceSession(folder + "/model.onnx", providers=["CPUExecutionProvider"])
began = time.perf_counter()
records = []
for start in range(0, len(texts), batch):
    rows = tokenizer.encode_batch(texts[start : start + batch])
    feed = {
        "input_ids": np.array([r.ids for r in rows], np.int64),
        "attention_mask": np.array([r.attention_mask for r in rows], np.int64),
        "token_type_ids": np.array([r.type_ids for r in rows], np.int64),
    }
    logits = session.run(["logits"], feed)[0]
    e = np.exp(logits - logits.max(-1, keepdims=True))
    records += [dict(zip(labels, map(float, p))) for p in e / e.sum(-1, keepdims=True)]
seconds = time.perf_counter() - began
write(records)
print(seconds)
""",
    "zhlm.pipeline": _READ
    + """
import zhlm
classify = zhlm.pipeline(folder, max_seq_length=seq, batch_size=batch)
began = time.perf_counter()
results = classify(texts)
seconds = time.perf_counter() - began
write([r["probabilities"] for r in results])
print(classify.summary, file=sys.stderr)
print(seconds)
""",
}

_EXPORT = """
import sys, torch, transformers
folder = sys.argv[1]
model = transformers.AutoModelForSequenceClassification.from_pretrained(
    folder, attn_implementation="eager"  # sdpa's mask would be traced for one input's padding
).eval()
ids = torch.ones(2, 16, dtype=torch.long)
mask = torch.ones_like(ids)
mask[1, 9:] = 0  # an input with padding, so that the traced graph keeps the mask
names = ["input_ids", "attention_mask", "token_type_ids"]
torch.onnx.export(
    model, (ids, mask, torch.zeros_like(ids)), folder + "/model.onnx", input_names=names,
    output_names=["logits"], opset_version=17, dynamo=False,
    dynamic_axes={**{n: {0: "batch", 1: "length"} for n in names}, "logits": {0: "batch"}},
)
"""


def exported_folder(root: str, size: str, seq: int) -> str:
    """A random ``size`` classifier as a zhlm workdir under ``root``, exported as a Hugging Face
    folder with its ONNX graph (``model.onnx``); returns the folder."""
    import zhlm
    from zhlm import run_files
    from zhlm.finetune import saved

    config = bench_predict.classifier_config(seq, size)
    workdir = bench_predict.tiny_workdir(os.path.join(root, "workdir"), config)
    best = run_files.path(workdir, run_files.BEST)
    model, params, config = saved.load_finetuned(str(best))
    folder = os.path.join(root, "hf")
    zhlm.to_hf(model, {"params": params}, config, folder, str(best / "vocab.txt"))
    subprocess.run([sys.executable, "-c", _EXPORT, folder], check=True, capture_output=True)
    return folder


def _command(runner: str, folder: str, inputs: str, output: str, seq: int, batch: int) -> list:
    if runner == "zhlm-predict":
        return [
            sys.executable, "-m", "zhlm.cli.predict", f"--workdir={folder}", f"--input={inputs}",
            f"--output={output}", f"--max_seq_length={seq}", f"--batch_size={batch}", "--quiet",
        ]  # fmt: skip
    return [sys.executable, "-c", CHILDREN[runner], folder, inputs, output, str(seq), str(batch)]


def measure(runner, folder, inputs, output, seq, batch, env) -> dict:
    """One child of ``runner``: whole-process seconds, in-memory seconds and its records."""
    if os.path.exists(output):
        os.remove(output)
    began = time.perf_counter()
    done = subprocess.run(
        _command(runner, folder, inputs, output, seq, batch),
        capture_output=True,
        text=True,
        env=env,
    )
    whole = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"{runner} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    if runner == "zhlm-predict":
        lines = [line for line in done.stderr.splitlines() if " records in " in line]
        in_memory = float(lines[-1].split(" records in ")[1].split(" s ")[0])
        note = lines[-1].split("examples/s), ")[1]
        records = [json.loads(line)["probabilities"] for line in open(output, encoding="utf-8")]
    else:
        in_memory = float(done.stdout.split()[-1])
        note = done.stderr.strip().splitlines()[-1] if runner == "zhlm.pipeline" else ""
        records = [json.loads(line) for line in open(output, encoding="utf-8")]
    return dict(whole=whole, in_memory=in_memory, records=records, note=note)


def _agreement(results: dict) -> str:
    """How far the runners' probabilities are from transformers', and how many labels differ."""
    reference = results["transformers.pipeline"]["records"]
    worst, differ = 0.0, 0
    for result in results.values():
        for ours, theirs in zip(result["records"], reference, strict=True):
            worst = max(worst, max(abs(ours[k] - theirs[k]) for k in theirs))
            differ += max(ours, key=ours.get) != max(theirs, key=theirs.get)
    return f"labels that differ from transformers': {differ}; probabilities within {worst:.1e}"


def run(args):
    tmp = tempfile.mkdtemp(prefix="zhlm-bench-peers-")
    env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    env["JAX_COMPILATION_CACHE_DIR"] = os.path.join(tmp, "jax-cache")  # this run's, empty
    env.pop("ZHLM_COMPILATION_CACHE", None)
    try:
        folder = exported_folder(tmp, args.size, args.seq)
        lines = args.lines[0] if args.lines else 1024
        inputs = os.path.join(tmp, "inputs.txt")
        with open(bench_predict.input_file(os.path.join(tmp, "in.tsv"), lines)) as f:
            texts = f.read().splitlines()[1:]
        with open(inputs, "w", encoding="utf-8") as f:
            f.write("\n".join(texts) + "\n")
        print(
            f"random {args.size} classifier, {lines:,} reviews, max length {args.seq}, batch "
            f"{args.batch}, {os.cpu_count()} CPUs, {args.reps} rounds (medians)",
            flush=True,
        )
        out = os.path.join(tmp, "out.jsonl")
        cold = measure("zhlm-predict", folder, inputs, out, args.seq, args.batch, env)
        timed = {runner: [] for runner in RUNNERS}
        for r in range(-1, args.reps):  # round -1: untimed, fills the caches of all
            order = RUNNERS[r % len(RUNNERS) :] + RUNNERS[: r % len(RUNNERS)]
            for runner in order:
                result = measure(runner, folder, inputs, out, args.seq, args.batch, env)
                if r >= 0:
                    timed[runner].append(result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    medians = {
        runner: dict(
            whole=statistics.median(x["whole"] for x in results),
            in_memory=statistics.median(x["in_memory"] for x in results),
            records=results[0]["records"],
            note=results[-1]["note"],
        )
        for runner, results in timed.items()
    }
    zhlm_whole = medians["zhlm-predict"]["whole"]
    zhlm_memory = medians["zhlm.pipeline"]["in_memory"]
    print(
        "\n| runner | whole process s | in memory s | whole vs zhlm-predict | in memory vs zhlm |"
    )
    print("|---|---|---|---|---|")
    for runner, m in medians.items():
        print(
            f"| {runner} | {m['whole']:.1f} | {m['in_memory']:.2f} | "
            f"{m['whole'] / zhlm_whole:.2f}x | {m['in_memory'] / zhlm_memory:.2f}x |"
        )
    print(
        f"\nzhlm-predict with an empty compilation cache: {cold['whole']:.1f} s whole, "
        f"{cold['in_memory']:.2f} s predicting ({cold['note']})"
    )
    print(f"zhlm-predict, cache filled: {medians['zhlm-predict']['note']}")
    print(f"zhlm.pipeline: {medians['zhlm.pipeline']['note']}")
    print(_agreement(medians))
