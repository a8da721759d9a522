"""``python tools/bench.py finetune``: zhlm-finetune against Hugging Face PyTorch fine-tuning, in
one run, on the same examples from the same weights.

  python tools/bench.py finetune [--tasks chnsenticorp lcqmc msra_ner] [--size tiny]
      [--max-train 2000] [--max-eval 600] [--epochs 2] [--batch 32] [--peak-lr 1e-3]
      [--pack on off] [--step-lengths 32 64 128]

Both sides start from one random-init Hugging Face ``BertFor<Task>`` folder of ``--size`` (zhlm
reads it as ``--init``), train on the examples zhlm's reader gives for the task's shared data (the
first ``--max-train`` training and ``--max-eval`` evaluation examples), with the task config's
optimizer settings (AdamW, peak learning rate, warmup share, weight decay, clipping, batch size,
sequence length; ``--peak-lr`` replaces the learning rate on both sides: the papers' 2e-5 is for a
pretrained encoder, and a random one learns nothing at it in a few epochs), and evaluate after
every epoch. The peer is what ``transformers.Trainer`` does: random batches, each padded to its
longest row (``DataCollatorWithPadding``; ``DataCollatorForTokenClassification`` for NER), AdamW
with a linear schedule, gradient clipping. Both sides correct Adam's moments for their bias (torch's
AdamW always does; zhlm's, as BERT's, does not by default, so the bench turns it on). zhlm runs in a
child process set up as ``zhlm-finetune``'s (``zhlm.cli.settle_process``: platform, host memory),
the peer in this one as PyTorch's default. Epoch 1 includes zhlm's compilation, so the figures are
those of the last epoch (its training and its evaluation pass): examples per second of training
rows, the ratio zhlm / peer, the real-token share of each side's computed positions (zhlm's from
its ``metrics.jsonl``: packed rows or length buckets; beside it the share if every batch were
padded to ``task.max_seq_length``), the dev metric after the same epochs (accuracy; NER: entity
micro-F1 by zhlm's conlleval metric on both sides), and how zhlm batched its training rows. zhlm
runs once per ``--pack`` setting (``task.pack``: on, several examples a row; off, length
buckets), each a row of the table against the same peer run.

``--step-lengths`` adds the train step alone at equal shapes: LCQMC's sentence-pair classifier of
``--size``, ``--batch`` rows of each length, every position real, median milliseconds of both
sides (zhlm's jitted step with its AdamW and clipping; the peer's forward, backward, clipping and
AdamW step), so the speed per token is told apart from the share of real tokens. ``--tasks``
with no task prints only that table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import bench_common  # tools/, the script's directory
import numpy as np

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared")
FILES = {  # task -> train file, dev file (relative to ../shared/data); "" : holdout of train
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "lcqmc": ("lcqmc/dev.txt", ""),
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),
}


def _config(task: str, args):
    from zhlm import config_files

    config = config_files.load(f"finetune/{task}", args.size)
    train, dev = FILES[task]
    data = os.path.join(os.path.abspath(DATA), "data")
    config.task.update(
        train_file=os.path.join(data, train), dev_file=os.path.join(data, dev) if dev else ""
    )
    config.train.update(
        epochs=args.epochs, seeds=1, batch_size=args.batch, log_every=0,
        max_train_examples=args.max_train, max_eval_examples=args.max_eval, save_best=False,
    )  # fmt: skip
    if args.peak_lr:
        config.optim.peak_lr = args.peak_lr
    config.task.pack = args.pack[0] == "on"
    config.optim.bias_correction = True  # the peer's torch AdamW always corrects
    return config


def _hf_bert_config(config, num_labels: int):
    """A Hugging Face ``BertConfig`` of the config's model size with Google's vocabulary."""
    import transformers

    from zhlm.models import SIZES

    dims = SIZES[config.model.size]
    return transformers.BertConfig(
        vocab_size=21128, hidden_size=dims["hidden_size"], num_hidden_layers=dims["num_layers"],
        num_attention_heads=dims["num_heads"], intermediate_size=4 * dims["hidden_size"],
        num_labels=num_labels,
    )  # fmt: skip


def _init_folder(task: str, config, path: str, num_labels: int) -> str:
    """A random ``BertFor<Task>`` of the config's size, with Google's vocabulary."""
    import shutil

    import torch
    import transformers

    from zhlm.data.tokenizer import default_vocab

    torch.manual_seed(0)
    hf = _hf_bert_config(config, num_labels)
    cls = (
        transformers.BertForTokenClassification
        if config.task.kind == "ner"
        else transformers.BertForSequenceClassification
    )
    cls(hf).save_pretrained(path)
    shutil.copyfile(default_vocab(), os.path.join(path, "vocab.txt"))
    return path


class _EpochClock:
    """stdout that notes when zhlm-finetune prints each epoch's line (after its dev pass)."""

    def __init__(self, stream):
        self.stream, self.marks, self.buckets = stream, [], "-"

    def write(self, text):
        if "zhlm-finetune: seed" in text and " epoch " in text:
            self.marks.append(time.monotonic())
        if text.startswith("zhlm-finetune: ") and " in training, " in text:
            self.buckets = text.split("zhlm-finetune: ")[1].split(" in training")[0]
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def _zhlm(config, init: str, workdir: str) -> dict:
    from zhlm.finetune.train import finetune
    from zhlm.train import metrics

    clock, stdout = _EpochClock(sys.stdout), sys.stdout
    sys.stdout, began = clock, time.monotonic()
    try:
        results = finetune(config, init, workdir)
    finally:
        sys.stdout = stdout
    marks = [began] + clock.marks
    (seed,) = results["seeds"]
    metric = results["metric"]
    share = metrics.read(workdir, f"seed{seed['seed']}")[-1]["real_token_fraction"]
    return dict(
        last_epoch=marks[-1] - marks[-2], total=marks[-1] - began, metric=seed[metric],
        real_share=share, buckets=clock.buckets,
    )  # fmt: skip


def _zhlm_child(task: str, args, init: str, workdir: str) -> dict:
    """:func:`_zhlm` in a ``finetune-worker`` child process (see :func:`worker`), with
    ``args.pack[0]``'s packing."""
    return bench_common.worker_result(
        ["finetune-worker", task, "--init", init, "--workdir", workdir, *_shared_flags(args)]
    )


def _shared_flags(args) -> list:
    """The options ``finetune`` passes on to its ``finetune-worker`` children."""
    return [
        "--size", args.size, "--max-train", args.max_train, "--max-eval", args.max_eval,
        "--epochs", args.epochs, "--batch", args.batch, "--peak-lr", args.peak_lr,
        "--pack", args.pack[0],
    ]  # fmt: skip


def worker(args):
    """zhlm's side of one task (or, with ``--step-length``, of one equal-shape step) in this
    process, set up as ``zhlm-finetune``'s; prints one JSON line."""
    from zhlm import cli

    cli.settle_process()
    if args.step_length:
        out = dict(seconds=_zhlm_step_seconds(_config(args.task, args), args.step_length))
    else:
        out = _zhlm(_config(args.task, args), args.init, args.workdir)
    print("RESULT" + json.dumps(out), flush=True)


STEP_TASK = "lcqmc"  # the equal-shape step's task: a sentence-pair classifier
STEP_REPS = 10
_HF_INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _step_batch(rows: int, length: int) -> dict:
    """``rows`` sequences of ``length`` real tokens: random ids, two segments, binary labels."""
    rng = np.random.RandomState(0)
    types = np.zeros((rows, length), np.int32)
    types[:, length // 2 :] = 1
    return dict(
        input_ids=rng.randint(1000, 21128, (rows, length)).astype(np.int32),
        token_type_ids=types, attention_mask=np.ones((rows, length), np.int32),
        label=rng.randint(0, 2, rows).astype(np.int32), weight=np.ones(rows, np.float32),
    )  # fmt: skip


def _zhlm_step_seconds(config, length: int) -> float:
    from zhlm.finetune import kinds
    from zhlm.finetune.train import task_trainer

    trainer = task_trainer(config, kinds.KINDS[config.task.kind], num_steps=1000)
    batch = _step_batch(config.train.batch_size, length)
    return bench_common.step_seconds(trainer, batch, STEP_REPS)


def _peer_step_seconds(config, length: int) -> float:
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    model = transformers.BertForSequenceClassification(_hf_bert_config(config, 2)).train()
    optim = config.optim
    opt = torch.optim.AdamW(model.parameters(), lr=optim.peak_lr, eps=optim.eps)
    batch = _step_batch(config.train.batch_size, length)
    inputs = {k: torch.tensor(batch[k], dtype=torch.long) for k in _HF_INPUTS}
    labels = torch.tensor(batch["label"], dtype=torch.long)

    def step():
        model(**inputs, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
        opt.step()
        opt.zero_grad()

    return bench_common.median_seconds(step, STEP_REPS, warmup=2)


def _step_table(args) -> None:
    print("\n| size | rows x length | zhlm step ms | peer step ms | peer / zhlm |")
    print("|---|---|---|---|---|")
    config = _config(STEP_TASK, args)
    for length in args.step_lengths:
        worker_args = ["finetune-worker", STEP_TASK, "--step-length", length, *_shared_flags(args)]
        ours = bench_common.worker_result(worker_args)["seconds"]
        peer = _peer_step_seconds(config, length)
        print(
            f"| {args.size} | {args.batch} x {length} | {1e3 * ours:.0f} | {1e3 * peer:.0f} | "
            f"{peer / ours:.2f} |",
            flush=True,
        )


def _hf_features(task, examples, tokenizer, config):
    """Token ids per example (labels too) as the peer's collator takes them, unpadded."""
    seq = config.task.max_seq_length
    labels = list(config.task.labels)
    rows = []
    for e in examples:
        if task == "msra_ner":
            enc = tokenizer(list(e.text), is_split_into_words=True, truncation=True, max_length=seq)
            words, previous, tags = enc.word_ids(), None, []
            for w in words:  # the first token of each character carries its tag
                tags.append(-100 if w is None or w == previous else labels.index(e.tags[w]))
                previous = w
            rows.append(dict(input_ids=enc["input_ids"], labels=tags))
        elif hasattr(e, "text_b"):
            enc = tokenizer(e.text_a, e.text_b, truncation=True, max_length=seq)
            rows.append(dict(enc, labels=labels.index(e.label)))
        else:
            enc = tokenizer(e.text, truncation=True, max_length=seq)
            rows.append(dict(enc, labels=labels.index(e.label)))
    return rows


def _hf(task, config, init, train, dev) -> dict:
    import torch
    import transformers

    from zhlm.finetune.metrics import conlleval
    from zhlm.finetune.train import warmup_steps

    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    tokenizer = transformers.BertTokenizerFast(os.path.join(init, "vocab.txt"))
    ner = task == "msra_ner"
    cls = (
        transformers.AutoModelForTokenClassification
        if ner
        else transformers.AutoModelForSequenceClassification
    )
    model = cls.from_pretrained(init)
    collate = (
        transformers.DataCollatorForTokenClassification(tokenizer)
        if ner
        else transformers.DataCollatorWithPadding(tokenizer)
    )
    rows, dev_rows = (_hf_features(task, x, tokenizer, config) for x in (train, dev))
    b, optim = config.train.batch_size, config.optim
    steps = config.train.epochs * -(-len(rows) // b)
    plain, decayed = [], []  # bias and LayerNorm without weight decay, as zhlm's AdamW
    for name, p in model.named_parameters():
        (plain if any(k in name for k in ("bias", "LayerNorm")) else decayed).append(p)
    groups = [
        dict(params=decayed, weight_decay=optim.weight_decay),
        dict(params=plain, weight_decay=0.0),
    ]
    opt = torch.optim.AdamW(groups, lr=optim.peak_lr, betas=(optim.b1, optim.b2), eps=optim.eps)
    schedule = transformers.get_linear_schedule_with_warmup(opt, warmup_steps(optim, steps), steps)
    loader = torch.utils.data.DataLoader(
        rows, batch_size=b, shuffle=True, collate_fn=collate,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    real = computed = 0
    marks, metric = [time.monotonic()], 0.0
    for _ in range(config.train.epochs):
        model.train()
        for batch in loader:
            real += int(batch["attention_mask"].sum())
            computed += batch["attention_mask"].numel()
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), optim.clip_norm)
            opt.step()
            schedule.step()
            opt.zero_grad()
        model.eval()
        predicted, gold = [], []
        with torch.no_grad():
            for i in range(0, len(dev_rows), b):
                batch = collate(dev_rows[i : i + b])
                logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
                if ner:
                    for row, guess in zip(batch["labels"], logits.argmax(-1), strict=True):
                        keep = row != -100
                        gold.append([config.task.labels[t] for t in row[keep]])
                        predicted.append([config.task.labels[t] for t in guess[keep]])
                else:
                    gold += batch["labels"].tolist()
                    predicted += logits.argmax(-1).tolist()
        if ner:
            metric = conlleval.scores(gold, predicted)["micro"]["f1"]  # a percentage
        else:
            metric = 100 * float(np.mean(np.asarray(gold) == np.asarray(predicted)))
        marks.append(time.monotonic())
    tokens = float(np.mean([len(r["input_ids"]) for r in rows]))
    return dict(
        last_epoch=marks[-1] - marks[-2], total=marks[-1] - marks[0], metric=metric,
        real_share=real / computed, fixed_share=tokens / config.task.max_seq_length,
    )  # fmt: skip


def run(args):
    from zhlm.finetune import kinds, task_files

    if args.tasks:
        print(
            "| task | size | train rows | zhlm ex/s | peer ex/s | ratio | zhlm real share | "
            "at max length | peer real share | zhlm dev | peer dev | zhlm batches |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for task in args.tasks:
        config = _config(task, args)
        train, dev, _ = task_files.read_task(kinds.get(config.task.kind), config.task)
        train, dev = train[: args.max_train], dev[: args.max_eval]
        with tempfile.TemporaryDirectory() as tmp:
            init = _init_folder(task, config, os.path.join(tmp, "init"), len(config.task.labels))
            ours = []
            for pack in args.pack:
                one = argparse.Namespace(**{**vars(args), "pack": [pack]})
                ours.append(_zhlm_child(task, one, init, os.path.join(tmp, f"zhlm-{pack}")))
            peer = _hf(task, config, init, train, dev)
        peer_rate = len(train) / peer["last_epoch"]
        for run in ours:
            rate = len(train) / run["last_epoch"]
            print(
                f"| {task} | {args.size} | {len(train):,} | {rate:.0f} | {peer_rate:.0f} | "
                f"{rate / peer_rate:.2f} | {run['real_share']:.1%} | {peer['fixed_share']:.1%} | "
                f"{peer['real_share']:.1%} | {run['metric']:.1f} | {peer['metric']:.1f} | "
                f"{run['buckets']} |",
                flush=True,
            )
    if args.step_lengths:
        _step_table(args)


def add_parsers(sub):
    p = sub.add_parser("finetune", help="zhlm-finetune against HF PyTorch on the same examples")
    p.add_argument("--tasks", nargs="*", default=list(FILES), choices=list(FILES))
    p.add_argument("--step-lengths", nargs="*", type=int, default=[], help="equal-shape steps")
    w = sub.add_parser("finetune-worker", help="(internal) zhlm's side of `finetune`")
    w.add_argument("task", choices=list(FILES))
    w.add_argument("--init", default="")
    w.add_argument("--workdir", default="")
    w.add_argument("--step-length", type=int, default=0)
    p.add_argument("--pack", nargs="+", default=["on", "off"], choices=["on", "off"])
    w.add_argument("--pack", nargs=1, default=["on"], choices=["on", "off"])
    for parser in (p, w):
        parser.add_argument("--size", default="tiny")
        parser.add_argument("--max-train", type=int, default=2000)
        parser.add_argument("--max-eval", type=int, default=600)
        parser.add_argument("--epochs", type=int, default=2)
        parser.add_argument("--batch", type=int, default=32)
        parser.add_argument(
            "--peak-lr", type=float, default=0.0, help="both sides (default: the task config's)"
        )
