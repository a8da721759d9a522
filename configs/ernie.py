"""ERNIE 1.0 (Sun et al., 2019): knowledge masking (basic, phrase and entity units), ReLU and
LayerNorm epsilon 1e-5 as in the released model, next-sentence prediction; ``dlm`` adds the
dialogue language model on multi-turn dialogues.

  zhlm-pretrain --config=configs/ernie.py:tiny --workdir=/tmp/zhlm-ernie
  zhlm-pretrain --config=configs/ernie.py:dlm --workdir=/tmp/zhlm-ernie-dlm

The argument picks the size (tiny ... large), or ``dlm``: tiny, trained on the bundled text
(``train``) mixed with the bundled dialogue sample (``dialogue``, zhlm.data.dialogue) as the
paper's DLM ablation mixed forum dialogue in (15.7% of the data); the dialogues' role
ids ride in the token types and their real/fake label in the NSP head. Every other key comes
from zhlm/defaults.py.

Held-out metrics are also kept per source (``dialogue/sentence_accuracy``, ``train/...``) and
per objective (``dlm_accuracy``: real/fake; ``nsp_accuracy``), zhlm.train.loop. The real/fake
judgement is learned only once the MLM leaves the unigram stage (measured runs, with the
second command's held-out dialogues: tools/results/measured_runs.md). With your own
dialogue JSON lines (``{"turns": [...]}`` per line):

  zhlm-pretrain --config=configs/ernie.py:dlm --workdir=/tmp/zhlm-dlm \
      --config.data.input='("dialogue=/path/to/dialogues.jsonl",)' \
      --config.data.mixture=dialogue:1 --config.train.num_steps=4000 \
      --config.optim.warmup_steps=400 --config.train.eval_every=250 \
      --config.train.eval_examples=1024
  zhlm-pretrain --config=configs/ernie.py:dlm --workdir=/tmp/zhlm-dlm-held \
      --config.data.input='("dialogue=/path/to/train.jsonl","heldout=/path/to/held.jsonl")' \
      --config.data.dialogue_sources='("dialogue","heldout")' \
      --config.data.mixture=dialogue:1,heldout:0 --config.train.eval_examples=1024
"""

import os

import zhlm
from zhlm import defaults
from zhlm.models import sizes

_RESOURCES = os.path.join(os.path.dirname(os.path.abspath(zhlm.__file__)), "resources")


def get_config(arg="base"):
    dlm = arg == "dlm"
    config = defaults.get_base_config()
    config.recipe = "ernie"
    config.model.size = "tiny" if dlm else sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.model.hidden_act = "relu"
    config.model.layer_norm_eps = 1e-05
    config.model.export_family = "ernie"  # ErnieForPreTraining, as the released model
    config.masking.scheme = "knowledge"
    config.masking.replacement = "partial_mask"
    config.data.format = "segment_pair"
    config.data.fields = ("phrase_ids", "entity_ids")
    config.optim.name = "adamw"
    if dlm:
        config.data.dialogue_sources = ("dialogue",)
        config.data.input = (
            f"train={_RESOURCES}/peoples_daily_199801_sample.txt",
            f"dialogue={_RESOURCES}/dialogue_sample.jsonl",
        )
        config.data.mixture = "train:84.3,dialogue:15.7"
    return defaults.local_scale(config)
