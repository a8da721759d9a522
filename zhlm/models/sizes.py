"""Model sizes as a lookup table (Google's BERT miniatures and the BERT/ALBERT papers).

A size names layers L, hidden width H and heads A; the feed-forward width is 4H. ALBERT's
factorised embedding width is a separate key (``model.embed_dim``), not part of the size.
"""

from zhlm.errors import UserError

SIZES = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4),
    "small": dict(num_layers=4, hidden_size=512, num_heads=8),
    "medium": dict(num_layers=8, hidden_size=512, num_heads=8),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12),
    "large": dict(num_layers=24, hidden_size=1024, num_heads=16),
    "xlarge": dict(num_layers=24, hidden_size=2048, num_heads=16),
    "xxlarge": dict(num_layers=12, hidden_size=4096, num_heads=64),
}

# BERT-family recipes were published up to large; ALBERT adds xlarge and xxlarge.
BERT_SIZES = ("tiny", "mini", "small", "medium", "base", "large")
ALBERT_SIZES = BERT_SIZES + ("xlarge", "xxlarge")


def check_size(name: str, allowed=BERT_SIZES) -> str:
    """Returns ``name`` or raises a UserError that lists the sizes this recipe has."""
    if name not in allowed:
        raise UserError(f"unknown size {name!r}; this recipe has: {', '.join(allowed)}")
    return name
