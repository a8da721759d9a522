"""SpanBERT (Joshi et al., 2020): geometric span masking (p=0.2, at most 10 words), the span
boundary objective, no NSP, single contiguous segments.

  zhlm-pretrain --config=configs/spanbert.py:tiny --workdir=/tmp/zhlm-spanbert

The argument picks the size (tiny ... large); every other key comes from zhlm/defaults.py.
"""

from zhlm import defaults
from zhlm.models import sizes


def get_config(arg="base"):
    config = defaults.get_base_config()
    config.recipe = "spanbert"
    config.model.size = sizes.check_size(arg or "base", sizes.BERT_SIZES)
    config.model.sentence_head = "none"
    config.model.span_boundary_head = True
    config.masking.scheme = "span"
    config.masking.replacement = "partial_mask"
    config.data.format = "doc_sentences"
    config.optim.name = "adamw"
    config.optim.bias_correction = True  # fairseq Adam
    return defaults.local_scale(config)
