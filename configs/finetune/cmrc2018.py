"""CMRC 2018 span-extraction reading comprehension, as in Chinese-BERT-wwm and MacBERT.

  zhlm-finetune --config=configs/finetune/cmrc2018.py --init=HF_OR_CKPT_DIR --workdir=/tmp/cmrc \
      --config.task.train_file=cmrc2018/cmrc2018_dev.json
  zhlm-cmrc-eval /tmp/cmrc/eval_set.json /tmp/cmrc/predictions_dev.json

Data: GitHub ymcui/cmrc2018, ``squad-style-data/`` (``cmrc2018_train.json``, ``_dev``, ``_trial``;
SQuAD v1 JSON). The recipe here has only the dev file, split by passage: 20% of the 848
passages (170, with their 656 questions), drawn with a fixed seed, evaluate, the other 678
(2,563 questions) train (``task.holdout=0.2``); no passage is in both. Scored with the official metric
against all three references of each question. Max length 512, doc stride 128, query 64,
answers up to 30 tokens (BERT's run_squad defaults), lr 3e-5, batch 32, 2 epochs.
With the training file: ``--config.task.train_file=cmrc2018_train.json
--config.task.dev_file=cmrc2018_dev.json --config.task.holdout=0``. DRCD reads the same way:
point ``task.train_file`` / ``task.dev_file`` at its SQuAD files.
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="cmrc2018",
        kind="mrc",
        format="squad",
        train_file="",  # cmrc2018_dev.json (split by holdout), or cmrc2018_train.json
        dev_file="",
        holdout=0.2,
        labels=(),
        max_seq_length=512,
        doc_stride=128,
        max_query_length=64,
        n_best_size=20,
        max_answer_length=30,
    )
    config.optim.peak_lr = 3e-5
    config.train.update(batch_size=32, epochs=2)
    return config
