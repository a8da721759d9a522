"""Reproduce the papers' tables from zhlm's own modules and runs; prints Markdown.

  python tools/reproduce_tables.py params            # ALBERT Table 1, parameter counts
  python tools/reproduce_tables.py TABLE --scale micro|mini|paper

Each table is one function in ``TABLES``; the paper's figure stands beside ours.
"""

import argparse
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

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


def load_config(recipe, arg):
    """``configs/<recipe>.py:get_config(arg)``, as the command-line tools load it."""
    path = os.path.join(ROOT, "configs", f"{recipe}.py")
    spec = importlib.util.spec_from_file_location(f"configs.{recipe}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


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
            config = load_config(recipe, size)
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


TABLES = {"params": params_table}


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("table", choices=sorted(TABLES))
    parser.add_argument("--scale", choices=("micro", "mini", "paper"), default="micro")
    args = parser.parse_args(argv)
    print(TABLES[args.table](args.scale))


if __name__ == "__main__":
    main()
