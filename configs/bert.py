"""BERT (Devlin et al., 2019): token-level MLM 15% with 80/10/10 replacement, and NSP.

  zhlm-pretrain --config=configs/bert.py:tiny --workdir=/tmp/zhlm-bert

The argument picks the size (tiny ... large); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "bert"
    config.model.size = sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.masking.scheme = "token"
    config.masking.replacement = "partial_mask"
    config.data.format = "segment_pair"
    config.optim.name = "adamw"  # BERT AdamWeightDecayOptimizer
    return defaults.local_scale(config)
