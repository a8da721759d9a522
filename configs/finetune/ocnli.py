"""OCNLI natural language inference (sentence pair, 3 classes), the CLUE benchmark's NLI task.

  zhlm-finetune --config=configs/finetune/ocnli.py --init=HF_OR_CKPT_DIR --workdir=/tmp/ocnli

Trains on the 10k-item sample of the training set (``train.10k.json``) and evaluates on the
official dev set; items whose annotators disagreed (label ``-``) are reported and skipped. Max
length 128, lr 3e-5, batch 32, 3 epochs.
"""

import os

from zhlm.finetune.train import get_base_config

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data")


def get_config(arg="base"):
    config = get_base_config(arg)
    config.task.update(
        name="ocnli",
        kind="pair",
        format="pair_jsonl",
        train_file=os.path.join(DATA, "ocnli", "train.10k.json"),
        dev_file=os.path.join(DATA, "ocnli", "dev.json"),
        labels=("entailment", "neutral", "contradiction"),
        max_seq_length=128,
    )
    config.optim.peak_lr = 3e-5
    config.train.update(batch_size=32, epochs=3)
    return config
