"""ALBERT (Lan et al., 2020): factorised embedding (E=128), all layers shared, sentence-order
prediction, no dropout, n-gram masking with P(n) proportional to 1/n for n <= 3.

  zhlm-pretrain --config=configs/albert.py:tiny --workdir=/tmp/zhlm-albert

The argument picks the size (tiny ... xxlarge); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "albert"
    config.model.size = sizes.check_size(arg or "base", sizes.ALBERT_SIZES)
    config.model.embed_dim = 128
    config.model.share_layers = "all"
    config.model.hidden_act = "gelu_new"
    config.model.dropout_rate = 0.0
    config.model.attention_dropout_rate = 0.0
    config.model.sentence_head = "sop"
    config.masking.scheme = "ngram"
    config.masking.replacement = "partial_mask"
    config.masking.ngram_probs = (6 / 11, 3 / 11, 2 / 11)  # 1/n, normalised
    config.data.format = "sop"
    config.optim.name = "lamb"  # ALBERT lamb_optimizer.py
    config.optim.peak_lr = 0.00176
    config.optim.trust_ratio_exclude = ("bias", "layer_norm")
    return defaults.local_scale(config)
