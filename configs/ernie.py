"""ERNIE 1.0 (Sun et al., 2019): knowledge masking (basic, phrase and entity units), ReLU and
LayerNorm epsilon 1e-5 as in the released model, next-sentence prediction.

  zhlm-pretrain --config=configs/ernie.py:tiny --workdir=/tmp/zhlm-ernie

The argument picks the size (tiny ... large); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "ernie"
    config.model.size = sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.model.hidden_act = "relu"
    config.model.layer_norm_eps = 1e-05
    config.masking.scheme = "knowledge"
    config.masking.replacement = "partial_mask"
    config.data.format = "segment_pair"
    config.data.fields = ("phrase_ids", "entity_ids")
    config.optim.name = "adamw"
    return defaults.local_scale(config)
