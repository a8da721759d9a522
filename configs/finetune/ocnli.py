"""OCNLI natural language inference (sentence pair, 3 classes), the CLUE benchmark's NLI task.

  zhlm-finetune --config=configs/finetune/ocnli.py --init=HF_OR_CKPT_DIR --workdir=/tmp/ocnli \
      --config.task.train_file=ocnli/train.10k.json --config.task.dev_file=ocnli/dev.json

Data: GitHub CLUEbenchmark/OCNLI, ``data/ocnli/``: JSON lines (the files are named ``.json``)
with ``sentence1, sentence2, label``. These runs train on a 10k-item sample of the training set
(``train.10k.json``; ``train.50k.json`` is all of it) and evaluate on the official dev set;
items whose annotators disagreed (label ``-``) are reported and skipped. Max length 128, lr
3e-5, batch 32, 3 epochs.
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="ocnli",
        kind="pair",
        format="jsonl",
        train_file="",  # ocnli/train.10k.json (or train.50k.json)
        dev_file="",  # ocnli/dev.json
        labels=("entailment", "neutral", "contradiction"),
        max_seq_length=128,
    )
    config.optim.peak_lr = 3e-5
    config.train.update(batch_size=32, epochs=3)
    return config
