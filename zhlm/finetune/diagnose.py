"""Two numbers printed before fine-tuning that tell a run stuck at the label prior (NER: all O,
F1 0) from a slow one, kept in ``results.json``.

The label prior loss (the task kind's ``prior``): the loss of a model that ignores its input
(the cross-entropy of predicting the training labels' frequencies; a regression's variance of
the scores), where a loss that learns nothing of the input stays.
``init_top_direction_share`` (pretrained inits): the share of the variance of the encoder's
outputs on the first training batch along their top direction. A random tiny encoder gives 4%
(MSRA); ERNIE tiny after 600 steps on the bundled sample, whose MLM never left the unigram stage
(accuracy 2.8%, the most frequent token), gave 99.9%: every token comes out as one vector, the
head can learn only the prior, and a 375-step MSRA run (4,000 sentences) from it stayed at F1 0
(dev, first 1,000 sentences) where a random encoder reached 10.8.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

# An init whose encoder output has more than this share of its variance along one direction
# has lost its tokens' identities.
COLLAPSED_SHARE = 0.9


def diagnose(prior: float | None, batch: dict, encode: Callable | None) -> dict:
    """Both numbers, printed; ``prior`` the label prior loss (None: the kind has none),
    ``batch`` the first training batch, ``encode(batch)`` the pretrained init's encoder
    outputs (None: a random init, no share)."""
    out = {}
    if prior is not None:
        out["label_prior_loss"] = prior
        print(
            f"zhlm-finetune: label prior loss {prior:.4f} (a train loss that stays there "
            "uses nothing of the input)",
            flush=True,
        )
    if encode is None:
        return out
    share = top_direction_share(np.asarray(jax.device_get(encode(batch)), np.float64), batch)
    out["init_top_direction_share"] = share
    if share > COLLAPSED_SHARE:
        print(
            f"zhlm-finetune: warning: the init's encoder output has {100 * share:.1f}% of its "
            "variance along one direction: its token representations have collapsed (an MLM "
            "still at the unigram stage does this), so fine-tuning starts from nothing and may "
            "predict only the most frequent label for many steps; pretrain longer",
            flush=True,
        )
    return out


def top_direction_share(x: np.ndarray, batch: dict) -> float:
    """Variance share of the top direction of the encoder outputs ``x`` [B,...,S,H] (a
    multiple-choice batch has an options axis), centred, at the real tokens of ``batch`` (less
    [CLS] and rows of weight 0); 1 when they have no variance at all."""
    real = np.asarray(batch["attention_mask"]) > 0
    real[..., 0] = False
    weight = np.asarray(batch["weight"])
    real &= weight.reshape(weight.shape + (1,) * (real.ndim - 1)) > 0
    h = x[real]
    centred = h - h.mean(0)
    energy = np.square(centred).sum()
    if energy <= 1e-10 * max(np.square(h).sum(), 1e-30):
        return 1.0
    top = np.linalg.svd(centred, compute_uv=False)[0] ** 2
    return float(top / energy)
