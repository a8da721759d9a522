"""LCQMC question matching (sentence pair, 2 classes), as in Chinese-BERT-wwm and MacBERT.

  zhlm-finetune --config=configs/finetune/lcqmc.py --init=HF_OR_CKPT_DIR --workdir=/tmp/lcqmc \
      --config.task.train_file=LCQMC/dev.txt

Data: LCQMC (Liu et al., COLING 2018), ``question1<TAB>question2<TAB>label`` without a header
(label last, read by position); the official release is on request from HIT Shenzhen (ICRC),
and GitHub IceFlameWorm/NLP_Datasets has ``LCQMC/{train,dev,test}.txt``. The recipe here has
only the dev file (8,802 pairs), split at random with a fixed seed within each label: 7,042
pairs train, 1,760 (880 of each label) evaluate (``task.holdout=0.2``), so its
numbers are not comparable with the papers' test-set figures. With the full release:
``--config.task.train_file=LCQMC/train.txt --config.task.dev_file=LCQMC/dev.txt
--config.task.holdout=0``. A CSV with a ``sentence1,sentence2,label`` header: add
``--config.task.format=csv``. Max length 128, lr 2e-5, batch 64, 3 epochs.
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="lcqmc",
        kind="pair",
        format="tsv",
        train_file="",  # LCQMC/dev.txt (split by holdout), or train.txt with dev_file
        dev_file="",
        holdout=0.2,
        labels=("0", "1"),
        max_seq_length=128,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=64, epochs=3)
    return config
