"""RoBERTa-wwm (Cui et al., 2021, the Chinese-BERT-wwm "RoBERTa-wwm-ext"): BERT architecture,
whole-word masking with dynamic (per-step) masks, no NSP, FULL-SENTENCES input, large batches.

  zhlm-pretrain --config=configs/roberta_wwm.py:tiny --workdir=/tmp/zhlm-roberta_wwm

The argument picks the size (tiny ... large); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "roberta_wwm"
    config.model.size = sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.model.sentence_head = "none"
    config.masking.scheme = "whole_word"
    config.masking.replacement = "partial_mask"
    config.data.format = "full_sentences"
    # AdamW: Cui et al.'s Table III (training details, arXiv 1906.08101) and the Model
    # Comparison of github.com/ymcui/Chinese-BERT-wwm give AdamW for RoBERTa-wwm(-ext); LAMB is
    # BERT-wwm's and MacBERT's.
    config.optim.name = "adamw"
    return defaults.local_scale(config)
