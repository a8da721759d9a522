"""MSRA-NER (SIGHAN 2006) named-entity recognition, as ERNIE 1.0 and Chinese-BERT-wwm report it.

  zhlm-finetune --config=configs/finetune/msra_ner.py --init=HF_OR_CKPT_DIR --workdir=/tmp/msra \
      --config.task.train_file=msra_ner/train.txt --config.task.dev_file=msra_ner/dev.txt

Data: character-level BIO tags for PER, LOC and ORG, ``char<TAB>tag`` lines, as GitHub
Determined22/zh-NER-TF ships them in ``data_path/`` (``train_data``, ``test_data``). These runs
use train 45,658 / dev 5,000 / test 4,631 sentences, dev being the last 5,000 sentences of the
upstream training file (nothing shuffled). Read with ``zhlm.finetune.readers.ner``, scored
with the conlleval entity F1 (``zhlm.finetune.metrics.conlleval``). No sentence is over 100
characters, so at 256 tokens the windows (``doc_stride``) never come into play here.
Max length 256, lr 5e-5, batch 16, 6 epochs, no warmup, weight decay 0.01: ERNIE 1.0's own
recipe (PaddlePaddle/ERNIE ``script/zh_task/ernie_base/run_msra_ner.sh``: ``--max_seq_len 256
--batch_size 16 --learning_rate 5e-5 --epoch 6 --warmup_proportion 0.0 --weight_decay 0.01``).
For the papers' test-set numbers, add ``--config.task.dev_file=<the same folder>/test.txt``.

A tiny model stays at all O (F1 0), its train loss at the label prior's (printed as ``label
prior loss``), when the run is too short for the encoder to tell tokens apart or when the init
has collapsed, which ``zhlm-finetune`` warns of (measured runs: tools/results/measured_runs.md).
"""

from zhlm.defaults import get_finetune_config


def get_config(arg="base"):
    config = get_finetune_config(arg)
    config.task.update(
        name="msra_ner",
        kind="ner",
        format="tagged",  # char<TAB>tag lines (zhlm.finetune.readers.ner.read_tagged)
        train_file="",  # msra_ner/train.txt: train_data less its last 5,000 sentences
        dev_file="",  # msra_ner/dev.txt: those 5,000 (test.txt: test_data)
        labels=("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"),
        max_seq_length=256,
        doc_stride=128,  # tokens between window starts for a sentence over 254 tokens
        scheme="auto",  # the files are BIO; detected
    )
    # Paddle's Adam corrects the moments' bias. BERT's uncorrected Adam with no warmup steps
    # about 30/sqrt(t) times the learning rate early on, and here the model collapses to all-O
    # (loss 0.45 against 0.003 with the correction, 600 steps on 73 windows).
    config.optim.update(peak_lr=5e-5, warmup_ratio=0.0, weight_decay=0.01, bias_correction=True)
    config.train.update(batch_size=16, epochs=6)
    return config
