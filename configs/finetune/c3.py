"""C3 multiple-choice reading comprehension (CLUE's C3): a passage, a question, 2-4 options.

  zhlm-finetune --config=configs/finetune/c3.py --init=HF_OR_CKPT_DIR --workdir=/tmp/c3 \
      --config.task.train_file=c3/c3-d-train.json,c3/c3-m-train.json \
      --config.task.dev_file=c3/c3-d-dev.json,c3/c3-m-dev.json

Data: GitHub nlpdata/c3, ``data/c3-{d,m}-{train,dev,test}.json``: ``d`` dialogues, ``m`` mixed
genres, read together (the comma-separated files are one set), 11,869 training and 3,816 dev
questions. Each question is scored as four sequences ``[CLS] passage [SEP] option [SEP] question
[SEP]`` (padded options masked), the passage cut to fit 512 tokens, never the question or an
option; accuracy. lr 2e-5, batch 16 questions (64 sequences), 3 epochs, not tuned here.
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="c3",
        kind="multiple_choice",
        format="c3",
        train_file="",  # c3-d-train.json,c3-m-train.json
        dev_file="",  # c3-d-dev.json,c3-m-dev.json
        holdout=0.0,
        labels=(),
        num_choices=4,
        max_seq_length=512,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=16, epochs=3)
    return config
