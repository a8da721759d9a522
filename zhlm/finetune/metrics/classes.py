"""Classification metrics: accuracy, each class's precision, recall and F1, and their macro F1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def class_scores(gold: np.ndarray, guess: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """``accuracy``, ``macro_f1`` and ``precision/<name>``, ``recall/<name>``, ``f1/<name>`` of
    each class (ids index ``names``), in percent; a class never predicted nor present counts 0
    in the macro mean."""
    scores = {"accuracy": 100 * float(np.mean(guess == gold)) if len(gold) else 0.0}
    f1s = []
    for i, name in enumerate(names):
        hit = float(np.sum((guess == i) & (gold == i)))
        precision = hit / max(float(np.sum(guess == i)), 1.0)
        recall = hit / max(float(np.sum(gold == i)), 1.0)
        f1 = 2 * precision * recall / (precision + recall) if hit else 0.0
        f1s.append(f1)
        scores.update({f"precision/{name}": 100 * precision, f"recall/{name}": 100 * recall})
        scores[f"f1/{name}"] = 100 * f1
    scores["macro_f1"] = 100 * float(np.mean(f1s))
    return scores
