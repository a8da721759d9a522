"""Chinese STS-B semantic similarity (sentence pair, a score from 0 to 5), regression.

  zhlm-finetune --config=configs/finetune/stsb.py --init=HF_OR_CKPT_DIR --workdir=/tmp/stsb \
      --config.task.train_file=STS-B/train.tsv --config.task.dev_file=STS-B/dev.tsv

Data: STS-B (Cer et al., SemEval 2017) in Chinese translation, ``sentence1<TAB>sentence2<TAB>
score`` without a header (the score last, read by position; 0 to 5, decimals allowed). Copies
with other columns (an id first, a header naming the score ``score``): pass
``--config.task.text_fields=1,2 --config.task.label_field=3`` (positions) or the header's names;
a CSV: ``--config.task.format=csv``. No copy is bundled: give both files, or one with
``--config.task.holdout=0.2``. A score that is not a number is reported with its line and the
record skipped. The dev metric is Spearman's correlation in percent (Pearson's and the mean
squared error beside it). Max length 128, lr 2e-5, batch 32, 3 epochs.
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="stsb",
        kind="regression",
        format="tsv",
        train_file="",  # STS-B train.tsv (s1<TAB>s2<TAB>score), or one file with holdout
        dev_file="",
        max_seq_length=128,
    )
    config.optim.peak_lr = 2e-5
    config.train.update(batch_size=32, epochs=3)
    return config
