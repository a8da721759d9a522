"""Reproduce the papers' tables from zhlm's own modules and runs; prints Markdown.

  python tools/reproduce_tables.py params            # ALBERT Table 1, parameter counts
  python tools/reproduce_tables.py masking --scale micro|mini|paper   # masking statistics
  python tools/reproduce_tables.py macbert_replacement --scale mini --workdir /tmp/tables
  python tools/reproduce_tables.py roberta_inputs --scale paper        # prints the TPU commands
  python tools/reproduce_tables.py albert_sharing --scale micro
  python tools/reproduce_tables.py tpu_plan [--workdir /tmp/zhlm_tpu_plan] [--quick]

Each table is one function in ``TABLES``; the paper's figure stands beside ours. The six
ablations (``tools/ablation_tables.py``) pretrain and fine-tune (``tools/ablations.py``: what
each scale runs; ``tools/ablation_paper.py``: the commands at paper scale); their runs are
kept in ``--workdir`` and reused, so an interrupted ``mini`` table continues where it stopped.
The table is printed and written to ``WORKDIR/TABLE-SCALE.md`` (``WORKDIR/tpu_plan.md``).
``tpu_plan`` compiles the papers' runs for Cloud TPU slices here (``tools/tpu_plan.py``,
libtpu's compiler, no TPU) and keeps each compiled plan in ``--workdir`` (default
``/tmp/zhlm_tpu_plan``), so a rerun is instant; ``--loader_records_per_second`` gives it the
loader's rate, else it measures it (``tools/bench.py loader``).

``tools/results`` is the record of what these runs measured (``--workdir tools/results`` for
the ablations, ``--workdir tools/results/tpu_plan`` for the plans; its ``.gitignore`` keeps
the tables, results and plans, not the checkpoints), so that a later run adds to it: a variant
whose fine-tunings are all kept is read back, not trained again.
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

import ablation_paper  # noqa: E402
import ablation_tables  # noqa: E402
import ablations  # noqa: E402
import tpu_plan  # noqa: E402

from zhlm import config_files  # noqa: E402
from zhlm.models import build_model, count_params  # noqa: E402

# ALBERT (Lan et al., 2020) Table 1, 30k vocabulary. xxlarge: the table says 235M, the paper's
# text 233M, google-research/albert's README 223M.
PAPER = [
    ("BERT-base", "bert", "base", "108M", 108e6),
    ("BERT-large", "bert", "large", "334M", 334e6),
    ("ALBERT-base", "albert", "base", "12M", 12e6),
    ("ALBERT-large", "albert", "large", "18M", 18e6),
    ("ALBERT-xlarge", "albert", "xlarge", "60M", 60e6),
    ("ALBERT-xxlarge", "albert", "xxlarge", "235M (README: 223M)", 223e6),
]


def _millions(n):
    return f"{n / 1e6:.2f}M"


def params_table(scale):
    """ALBERT Table 1 from ``jax.eval_shape`` of our models (no memory is allocated)."""
    del scale  # counting needs no training: every scale prints the same table
    lines = []
    for vocab, title in (
        (30000, "the paper's 30k vocabulary"),
        (21128, "the Chinese vocabulary (21,128)"),
    ):
        lines += [
            f"### Parameters with {title}",
            "",
            "| model | L | H | E | shared | paper | body (emb + encoder) | + pooler "
            "| + MLM and sentence heads | full model vs paper |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, recipe, size, paper, paper_n in PAPER:
            config = config_files.load(recipe, size)
            config.model.vocab_size = vocab
            model = build_model(config)
            c = count_params(model)
            body = c["embeddings"] + c["encoder"]
            pooled = body + c["pooler"]
            full = pooled + c["mlm"] + c.get("sentence", 0)
            cfg = model.config
            diff = f"{100 * (full - paper_n) / paper_n:+.1f}%" if vocab == 30000 else "n/a"
            width = cfg.embed_dim or cfg.hidden_size
            published = paper if vocab == 30000 else "-"
            lines.append(
                f"| {name} | {cfg.num_layers} | {cfg.hidden_size} | {width} | {cfg.share_layers} "
                f"| {published} | {_millions(body)} | {_millions(pooled)} | {_millions(full)} "
                f"| {diff} |"
            )
        lines.append("")
    lines += [
        "Body: word, position and token-type embeddings with their LayerNorm (and ALBERT's E->H",
        "projection) plus the encoder. The pooler is the tanh layer on [CLS]; the MLM head is the",
        "transform (Dense + LayerNorm) and the output bias (the decoder weight is tied to the",
        "embeddings, so it is not counted twice); the sentence head is the 2-way NSP/SOP layer.",
        "The percentage compares the full pretraining model (every variable of a released",
        "checkpoint) with the published figure, which is rounded to the nearest million; for",
        "ALBERT-xxlarge it uses the README's 223M (the table's 235M would be -5.0%: no",
        "configuration of the published dimensions reaches it).",
    ]
    return "\n".join(lines)


# What each recipe's paper specifies for its masking, beside what we measure.
MASKING_PAPER = {
    "bert": "15% of tokens; 80% [MASK], 10% random, 10% kept",
    "roberta_wwm": "15% of tokens, whole words; 80/10/10",
    "ernie": "15%; basic (word), phrase and entity levels",
    "spanbert": "15%; spans of geometric(0.2) words, at most 10, mean 3.8 words; 80/10/10",
    "albert": "15%; n-grams of n <= 3 words, P(n) = 6/11, 3/11, 2/11; 80/10/10",
    "macbert": "15%; n-grams 40/30/20/10%; 80% similar word, 10% random, 10% kept",
}
MASKING_SCALE = {"micro": (4, 32), "mini": (64, 64), "paper": (256, 64)}  # batches, batch size


def _units(word_ids, unit_index, selected):
    """Per selection unit with a selected token: (whole words in the unit, fully masked?)."""
    for row in range(selected.shape[0]):
        w, u, sel = word_ids[row], unit_index[row], selected[row]
        for unit in np.unique(u[sel]):
            inside = u == unit
            yield len(np.unique(w[inside])), bool(sel[inside].all())


def masking_table(scale):
    """Masking statistics of every recipe measured on the bundled People's Daily sample (real
    jieba words, THUOCL entities and phrases, Cilin similar words) through the real pipeline
    and ``zhlm.masking.mask_batch``."""
    import jax

    from zhlm import masking
    from zhlm.data import cache
    from zhlm.data import loader as data_loader

    batches, batch_size = MASKING_SCALE[scale]
    lines = [
        f"### Masking on real text ({batches} batches of {batch_size} x 128 tokens, "
        "the bundled People's Daily sample)",
        "",
        "| recipe | scheme | paper | masked | [MASK] / similar / random / kept "
        "| words per unit: 1 / 2 / 3 / 4+ | mean words per unit | units cut by the budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    assert set(MASKING_PAPER) == set(config_files.RECIPES), "a recipe without its paper's masking"
    for recipe in sorted(config_files.RECIPES):
        config = config_files.load(recipe, "tiny")
        config.train.batch_size, config.train.eval_examples = batch_size, 0
        loader = data_loader.from_config(cache.ensure_dataset(config, progress=False), config)
        fn = jax.jit(lambda b, k, c=config: masking.mask_batch(b, k, c, details=True))
        real = chosen = 0
        codes = np.zeros(4)
        lengths, cut = [], []
        for i in range(batches):
            batch = next(loader)
            _, d = jax.device_get(fn(batch, jax.random.key(i)))
            selected = d["selected"]
            real += int((batch["word_ids"] >= 0).sum())
            chosen += int(selected.sum())
            codes += np.bincount(d["replacement"][selected], minlength=4)[:4]
            for words, picked in _units(batch["word_ids"], d["unit_index"], selected):
                lengths.append(words)
                cut.append(picked)
        shares = codes / max(codes.sum(), 1)
        order = (masking.MASK, masking.SIMILAR, masking.RANDOM, masking.KEEP)
        hist = np.bincount(np.minimum(lengths, 4), minlength=5)[1:5] / max(len(lengths), 1)
        lines.append(
            f"| {recipe} | {config.masking.scheme} | {MASKING_PAPER[recipe]} "
            f"| {100 * chosen / real:.1f}% | "
            + " / ".join(f"{100 * shares[c]:.0f}%" for c in order)
            + " | "
            + " / ".join(f"{100 * h:.0f}%" for h in hist)
            + f" | {np.mean(lengths):.2f} | {100 * (1 - np.mean(cut)):.0f}% |"
        )
    lines += [
        "",
        "Masked: selected tokens over real tokens ([CLS], [SEP] and padding excluded). A unit is",
        "one selection (a word, n-gram, span, phrase or entity) with at least one token masked;",
        "its length counts the whole words it was drawn with. The last unit that reaches the 15%",
        "budget is masked only in part (overflow='truncate' keeps the count exact): the last",
        "column is the share of such units, which 128-token sequences make large for long units.",
    ]
    return "\n".join(lines)


def ablation_table(name):
    """One of ``ablation_tables.ABLATIONS``: trained at micro or mini, commands at paper scale."""

    def run(scale, workdir):
        text = ablation_paper.paper_commands(name) if scale == "paper" else ""
        if scale != "paper":
            text = ablations.table(name, scale, workdir)
        if name == "albert_sharing":
            text = ablation_paper.albert_params_table() + "\n\n" + text
        return text

    return run


def tpu_plan_run(args):
    """``tpu_plan``: the loader's rate measured in this run unless given, then the table."""
    import bench_common

    rate = args.loader_records_per_second
    if rate is None and not args.quick:
        rate = bench_common.loader_rate()["records_per_second"]
    workdir = args.workdir if args.workdir_given else tpu_plan.DEFAULT_WORKDIR
    cached = "stale" if args.stale else args.cached_only
    return tpu_plan.tpu_plan_table(args.scale, workdir, args.quick, rate, args.find_batch, cached)


TABLES = {
    "params": lambda scale, workdir: params_table(scale),
    "masking": lambda scale, workdir: masking_table(scale),
    **{name: ablation_table(name) for name in ablation_tables.ABLATIONS},
    "tpu_plan": None,  # takes the parsed arguments: tpu_plan_run
}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--scale", choices=("micro", "mini", "paper"), default="micro")
    default_workdir = os.path.join(os.path.expanduser("~"), ".cache", "zhlm", "tables")
    parser.add_argument(
        "--workdir",
        default=None,
        help="where the ablations' runs are kept and reused (default: ~/.cache/zhlm/tables; "
        f"tpu_plan: {tpu_plan.DEFAULT_WORKDIR})",
    )
    parser.add_argument("--quick", action="store_true", help="tpu_plan: the tiny test row only")
    parser.add_argument(
        "--find_batch", action="store_true", help="tpu_plan: plan.find_batch (many compiles)"
    )
    parser.add_argument(
        "--cached_only", action="store_true", help="tpu_plan: compile nothing, cached plans only"
    )
    parser.add_argument(
        "--stale", action="store_true", help="tpu_plan: older code's or compiler's plans, marked"
    )
    parser.add_argument(
        "--loader_records_per_second",
        type=float,
        default=None,
        help="tpu_plan: one loader process's records/s (default: measured in this run)",
    )
    args = parser.parse_args(argv)
    args.workdir_given = args.workdir is not None
    args.workdir = args.workdir or default_workdir
    if args.table == "tpu_plan":
        text = tpu_plan_run(args)
    else:
        text = TABLES[args.table](args.scale, os.path.join(args.workdir, args.scale))
    os.makedirs(args.workdir, exist_ok=True)
    name = "tpu_plan" if args.table == "tpu_plan" else f"{args.table}-{args.scale}"  # no scale
    with open(os.path.join(args.workdir, f"{name}.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
