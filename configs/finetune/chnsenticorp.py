"""ChnSentiCorp sentiment (2 classes), as in ERNIE, Chinese-BERT-wwm and MacBERT.

  zhlm-finetune --config=configs/finetune/chnsenticorp.py --init=HF_OR_CKPT_DIR --workdir=/tmp/cs

The ERNIE split (train 9,600 / dev 1,200) from ../shared/data; max length 256, lr 2e-5, batch
32, 3 epochs, within what the papers use (lr 2e-5..3e-5, batch 32/64, 2-3 epochs). The
argument picks the size of a random encoder (used only without --init; with it the
checkpoint's dimensions apply). The other task files take the same argument.
"""

import os

from zhlm.finetune.train import get_base_config

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data")


def get_config(arg="base"):
    config = get_base_config(arg)
    config.task.update(
        name="chnsenticorp",
        kind="classification",
        format="sentence_tsv",
        train_file=os.path.join(DATA, "chnsenticorp", "train.tsv"),
        dev_file=os.path.join(DATA, "chnsenticorp", "dev.tsv"),
        labels=("0", "1"),
        max_seq_length=256,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=32, epochs=3)
    return config
