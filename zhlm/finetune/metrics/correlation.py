"""Correlation metrics of a regression: Pearson's, and Spearman's (Pearson's of the ranks)."""

from __future__ import annotations

import math

import numpy as np


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation of ``x`` and ``y``; 0 where either is constant (or has under two
    values), so a model predicting one number scores as one unrelated to the gold."""
    if len(x) < 2:
        return 0.0
    x, y = x - np.mean(x), y - np.mean(y)
    norm = math.sqrt(float(np.sum(x * x)) * float(np.sum(y * y)))
    return float(np.sum(x * y)) / norm if norm > 0 else 0.0


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation of ``x`` and ``y``, ties sharing their mean rank."""
    return pearson(average_ranks(x), average_ranks(y))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, tied values sharing the mean of their ranks (Spearman's
    correlation is Pearson's of these)."""
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])[: len(x)]
    sizes = np.diff(np.r_[starts, len(x)])
    mean_rank = starts + (sizes + 1) / 2  # ranks starts+1 .. starts+sizes
    ranks = np.empty(len(x))
    ranks[order] = np.repeat(mean_rank, sizes)
    return ranks
