"""``python tools/bench.py tokens``: the share of real tokens in every recipe's pretraining records.

  python tools/bench.py tokens [--recipes bert ernie] [--seq 128 512] [--corpus FILE ...]
      [--pack off on]

For each recipe (its ``tiny`` config: the records do not depend on the model size) and each
sequence length, the records zhlm-prepare's code makes from each corpus (the People's Daily
sample bundled in zhlm, and any ``--corpus`` file) are read back whole, and the real tokens
(``attention_mask`` 1: [CLS], [SEP] and text) are counted against the positions computed. A
share below 100% is padding that every train step computes: short documents, document ends,
``short_seq_prob`` pairs, SOP and NSP's shortened segments. Each is measured unpacked and packed
(``data.pack``, :mod:`zhlm.data.packing`: several instances per row), where rows also shrink
in number. Datasets are prepared once into zhlm's cache (``ZHLM_CACHE``), as a run would.
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


def run(args):
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
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    p.add_argument("--seq", nargs="+", type=int, default=[128, 512])
    p.add_argument("--corpus", nargs="*", default=[], help="more text files, one table row each")
    p.add_argument("--pack", nargs="+", default=["off", "on"], choices=["off", "on"])
