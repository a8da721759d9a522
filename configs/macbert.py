"""MacBERT (Cui et al., 2020): whole-word and n-gram masking (1-4 words, 0.4/0.3/0.2/0.1),
MLM as correction (80% similar word, 10% random, 10% kept), sentence-order prediction.

  zhlm-pretrain --config=configs/macbert.py:tiny --workdir=/tmp/zhlm-macbert

The argument picks the size (tiny ... large); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "macbert"
    config.model.size = sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.model.sentence_head = "sop"
    config.masking.scheme = "correction"
    config.masking.replacement = "mac"
    config.data.format = "sop"
    config.data.fields = ("similar_ids",)
    config.optim.name = "lamb"  # MacBERT: LAMB, as BERT-wwm
    return defaults.local_scale(config)
