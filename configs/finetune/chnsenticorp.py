"""ChnSentiCorp sentiment (2 classes), as in ERNIE, Chinese-BERT-wwm and MacBERT.

  zhlm-finetune --config=configs/finetune/chnsenticorp.py --init=HF_OR_CKPT_DIR --workdir=/tmp/cs \
      --config.task.train_file=chnsenticorp/train.tsv --config.task.dev_file=chnsenticorp/dev.tsv

Data: the ERNIE / Chinese-BERT-wwm split (train 9,600 / dev 1,200 / test 1,200 reviews), TSV
with the header ``label<TAB>text_a``, as GitHub dbiir/UER-py ships it in
``datasets/chnsenticorp/`` (also in ERNIE's task data). Another layout of the same reviews, e.g.
a ``label,review`` CSV: add ``--config.task.format=csv`` (the columns are found by name). The
label order ``0, 1`` (negative, positive) is the classifier's output order. Max length 256,
lr 2e-5, batch 32, 3 epochs, within what the papers use (lr 2e-5..3e-5, batch 32/64, 2-3
epochs). The argument picks the size of a random encoder (used only without --init; with it
the checkpoint's dimensions apply). The other task files take the same argument, and give
their data paths the same way (``--config.task.train_file``; a missing one is an error).
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="chnsenticorp",
        kind="classification",
        format="tsv",
        train_file="",  # chnsenticorp/train.tsv
        dev_file="",  # chnsenticorp/dev.tsv (test.tsv for the papers' test figures)
        labels=("0", "1"),
        max_seq_length=256,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=32, epochs=3)
    return config
