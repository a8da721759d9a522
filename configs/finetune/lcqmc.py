"""LCQMC question matching (sentence pair, 2 classes), as in Chinese-BERT-wwm and MacBERT.

  zhlm-finetune --config=configs/finetune/lcqmc.py --init=HF_OR_CKPT_DIR --workdir=/tmp/lcqmc

Only the official dev file (8,802 pairs) is offline, so it is split in file order: the first
80% (7,042 pairs) train, the last 20% (1,760) evaluate (``task.holdout=0.2``; both halves are
close to balanced). Numbers are therefore not comparable with the papers' test-set figures.
Max length 128, lr 2e-5, batch 64, 3 epochs.
"""

import os

from zhlm.finetune.train import get_base_config

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data")


def get_config(arg="base"):
    config = get_base_config(arg)
    config.task.update(
        name="lcqmc",
        kind="pair",
        format="pair_tsv",
        train_file=os.path.join(DATA, "lcqmc", "dev.txt"),
        dev_file="",
        holdout=0.2,
        labels=("0", "1"),
        max_seq_length=128,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=64, epochs=3)
    return config
