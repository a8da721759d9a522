"""The papers' pretraining runs as published (batch, sequence length, steps, each with its
source) and the Cloud TPU generations and slice sizes ``tools/tpu_plan.py`` plans them on.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Run:
    """One pretraining run as published: what to plan and where the figures come from."""

    name: str
    recipe: str
    size: str
    batch: int
    seq: int
    steps: int
    source: str
    verified: bool = True  # False: the figure could not be checked against the paper here
    layers: int = 0  # > 0: that many layers instead of the size's (the quick test row)


_BERT = (
    "Devlin et al. 2019, App. A.2: batch 256 for 1,000,000 steps; seq 128 for 90% of the "
    "steps, 512 for the last 10%"
)
_WWM = (
    "ymcui/Chinese-BERT-wwm README, Model Comparison (Cui et al. 2021's release): 2M steps "
    "at max length 512, batch 512, AdamW, TPU Pod v3-32, random init"
)
RUNS = (
    Run("BERT-base, seq 128 phase", "bert", "base", 256, 128, 900_000, _BERT),
    Run("BERT-base, seq 512 phase", "bert", "base", 256, 512, 100_000, _BERT),
    Run("BERT-large, seq 128 phase", "bert", "large", 256, 128, 900_000, _BERT),
    Run("BERT-large, seq 512 phase", "bert", "large", 256, 512, 100_000, _BERT),
    Run("RoBERTa-wwm-ext-large", "roberta_wwm", "large", 512, 512, 2_000_000, _WWM),
    Run(
        "MacBERT-large",
        "macbert",
        "large",
        512,
        512,
        2_000_000,
        "Cui et al., journal version (IEEE TASLP 2021, arXiv 1906.08101), Sec. on pre-training: "
        "MacBERT-large trained from scratch for 2M steps at batch 512, LAMB, lr 1e-4, max "
        "length 512 throughout",
    ),
    Run(
        "ALBERT-xxlarge",
        "albert",
        "xxlarge",
        4096,
        512,
        125_000,
        "Lan et al. 2020, Sec. 4.1: batch 4096, LAMB lr 0.00176, 125,000 steps unless "
        "otherwise specified; inputs up to 512 tokens. The longer xxlarge run (1.5M steps) "
        "is not verified here: x12 the days",
    ),
    Run(
        "SpanBERT-large",
        "spanbert",
        "large",
        256,
        512,
        2_400_000,
        "Joshi et al. 2020, Sec. 4.2 (arXiv 1907.10529): batch 256 sequences of at most 512 "
        "tokens, 2.4M steps, AdamW",
    ),
)
QUICK_RUNS = (
    Run("tiny (test)", "bert", "tiny", 32, 64, 1000, "zhlm's tiny size, 1 layer: tests", layers=1),
)

# Accelerator types in order of size (the number is what Cloud TPU counts: v4 and v5p
# TensorCores, two per chip; v5e and v6e chips).
GENERATIONS = {
    "v4": (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    "v5litepod": (1, 4, 8, 16, 32, 64, 128, 256),
    "v5p": (8, 16, 32, 64, 128, 256, 512, 1024, 2048),
    "v6e": (1, 4, 8, 16, 32, 64, 128, 256),
}
# LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76
# minutes", abstract): BERT-large in 8,599 iterations at batch 65536/32768 instead of 1M,
# 76 minutes on a TPUv3 pod (1,024 chips), against about three days on 16 TPUv3 chips.
LAMB_CLAIM = (
    "Reference point: LAMB (You et al. 2020) trained BERT-large in 76 minutes on a TPU v3 pod "
    "(1,024 chips) with batch 65,536 (seq 128) / 32,768 (seq 512) for 8,599 iterations, "
    "instead of 1M iterations at batch 256 (about three days on 16 TPU v3 chips)."
)

# The run whose step tools/tpu_parts.py takes apart.
PARTS_RUN = Run("BERT-base, seq 128 phase", "bert", "base", 256, 128, 900_000, _BERT)
