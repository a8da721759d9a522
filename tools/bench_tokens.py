"""``python tools/bench.py tokens``: the share of real tokens in every recipe's pretraining records
and in every shipped fine-tuning task's batches.

  python tools/bench.py tokens [--recipes bert ernie] [--seq 128 512] [--corpus FILE ...]
      [--pack off on] [--tasks lcqmc msra_ner]

For each recipe (its ``tiny`` config: the records do not depend on the model size) and each
sequence length, the records zhlm-prepare's code makes from each corpus (the People's Daily
sample bundled in zhlm, and any ``--corpus`` file) are read back whole, and the real tokens
(``attention_mask`` 1: [CLS], [SEP] and text) are counted against the positions computed. A
share below 100% is padding that every train step computes: short documents, document ends,
``short_seq_prob`` pairs, SOP and NSP's shortened segments. Each is measured unpacked and packed
(``data.pack``, :mod:`zhlm.data.packing`: several instances per row), where rows also shrink
in number. Datasets are prepared once into zhlm's cache (``ZHLM_CACHE``), as a run would.

Fine-tuning (``--tasks``, every config of ``configs/finetune`` whose data is in
``../shared/data``; none: ``--tasks`` with no name): each task's training examples featurized as
a run does (its ``max_seq_length`` and ``batch_size``), and the real tokens counted against the
positions computed in length buckets (``task.pack=False``), packed for training (one epoch's
shuffled order, online best-fit, its fixed rows per step, empty rows included) and packed for
evaluation (best-fit-decreasing, rows only). MRC windows and multiple-choice options are not
packed in a run (they keep buckets): for them the packed columns say what best-fit-decreasing
would reach, per window or per option, in brackets.
"""

import contextlib
import os
import sys

import numpy as np

from zhlm.config_files import RECIPES


def real_share(recipe: str, seq: int, corpus: str, pack: bool = False) -> tuple[int, float]:
    """``(records, real tokens / positions)`` of ``recipe``'s records at ``seq`` tokens,
    packed or not."""
    import tensorflow_datasets as tfds

    from zhlm import config_files
    from zhlm.data import cache

    config = config_files.load(recipe, "tiny")
    config.data.max_seq_length = seq
    config.data.pack = pack
    config.data.input = (corpus,) if corpus else ()
    with contextlib.redirect_stdout(sys.stderr):  # TFDS prints its progress: keep the table clean
        path = cache.ensure_dataset(config, progress=False)
    builder = tfds.builder_from_directory(path)
    mask = list(builder.info.metadata["fields"]).index("attention_mask")
    real = records = 0
    for split in builder.info.splits:
        source = builder.as_data_source(split=split)
        for i in range(len(source)):
            real += int(np.asarray(source[i]["arrays"])[mask].sum())
        records += len(source)
    return records, real / (records * seq)


# The shipped task configs name no data: the files each reads here (relative to ../shared/data;
# no dev file: the config's holdout split of the training file).
TASK_DATA = {
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "lcqmc": ("lcqmc/dev.txt", ""),
    "ocnli": ("ocnli/train.10k.json", "ocnli/dev.json"),
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),
    "c3": ("c3/c3-d-train.json,c3/c3-m-train.json", "c3/c3-d-dev.json,c3/c3-m-dev.json"),
    "cmrc2018": ("cmrc2018/cmrc2018_dev.json", ""),
}
SHARED_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")


def task_shares(task: str) -> dict:
    """The real-token shares of ``task``'s training examples (module docstring)."""
    from zhlm import config_files
    from zhlm.finetune import batching, kinds, packing, task_files

    config = config_files.load(f"finetune/{task}", "tiny")
    train_file, dev_file = TASK_DATA[task]
    data = os.path.abspath(SHARED_DATA)
    config.task.train_file = ",".join(os.path.join(data, f) for f in train_file.split(","))
    config.task.dev_file = ",".join(os.path.join(data, f) for f in dev_file.split(",") if f)
    kind = kinds.get(config.task.kind)
    with contextlib.redirect_stdout(sys.stderr):
        train, _, _ = task_files.read_task(kind, config.task)
        train = kind.training_examples(config.task, train)
        tokenizer = task_files.load_tokenizer(config.task)
        arrays = kind.featurize(train, tokenizer, config.task, training=True).arrays
    batch_size, width = config.train.batch_size, config.task.max_seq_length
    real = int(arrays["attention_mask"].sum())
    buckets = batching.Buckets.of(arrays, config.task.length_buckets)
    out = dict(
        kind=kind.name, seq=width, examples=len(train), rows=len(arrays["input_ids"]),
        buckets=real / buckets.computed_positions(batch_size), packs=kind.readout is not None,
    )  # fmt: skip
    if kind.readout is not None:
        epochs = packing.Epochs(arrays, batch_size, kind.readout, seeds=[0], epochs=1)
        out["train"] = real / epochs.computed_positions(batch_size)
        out["rows_per_step"] = epochs.rows_per_step
    # Sorted: over every sequence (an option of a [N,C,S] row is one), as evaluation packs.
    mask = arrays["attention_mask"].reshape(-1, width)
    lengths = batching.row_lengths({"attention_mask": mask})
    out["sorted"] = packing.Layout.of(lengths[lengths > 0], width).real_token_fraction()
    return out


def _task_table(tasks) -> None:
    print("| task | kind | seq | train examples | length buckets | packed, training | "
          "packed, evaluation (sorted) | rows a step |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for task in tasks:
        s = task_shares(task)
        train = f"{s['train']:.1%}" if s["packs"] else "not packed"
        rows = str(s["rows_per_step"]) if s["packs"] else "-"
        sorted_share = f"{s['sorted']:.1%}" if s["packs"] else f"({s['sorted']:.1%})"
        print(
            f"| {task} | {s['kind']} | {s['seq']} | {s['examples']:,} | {s['buckets']:.1%} | "
            f"{train} | {sorted_share} | {rows} |",
            flush=True,
        )


def run(args):
    if args.tasks:
        _task_table(args.tasks)
    if not args.recipes:
        return
    corpora = [("bundled People's Daily", "")] + [(os.path.basename(c), c) for c in args.corpus]
    packs = [p == "on" for p in args.pack]
    head = "".join(f" rows {p} | real-token share {p} |" for p in args.pack)
    print(f"| recipe | corpus | seq |{head}")
    print("|---|---|---|" + "---|---|" * len(packs))
    for recipe in args.recipes:
        for name, corpus in corpora:
            for seq in args.seq:
                cells = ""
                for pack in packs:
                    records, share = real_share(recipe, seq, corpus, pack)
                    cells += f" {records:,} | {share:.1%} |"
                print(f"| {recipe} | {name} | {seq} |{cells}", flush=True)


def add_parser(sub):
    p = sub.add_parser("tokens", help="real-token share of each recipe's pretraining records")
    p.add_argument("--recipes", nargs="*", default=list(RECIPES), choices=RECIPES)
    p.add_argument("--seq", nargs="+", type=int, default=[128, 512])
    p.add_argument("--corpus", nargs="*", default=[], help="more text files, one table row each")
    p.add_argument("--pack", nargs="+", default=["off", "on"], choices=["off", "on"])
    p.add_argument(
        "--tasks", nargs="*", default=list(TASK_DATA), choices=list(TASK_DATA),
        help="shipped fine-tuning tasks (configs/finetune) whose batches are counted",
    )  # fmt: skip
