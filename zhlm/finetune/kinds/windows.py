"""Token layouts the task kinds share: special ids, BERT's pair truncation, and windows over
a long token sequence with BERT's max-context rule (MRC and NER both cut texts into windows)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def special_ids(tokenizer) -> tuple[int, int, int]:
    """``([CLS], [SEP], [PAD])`` ids of the vocab."""
    return tuple(tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))


def truncate_pair(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Lengths after BERT's ``_truncate_seq_pair``: drop the last token of the longer text (of
    ``b`` on a tie) until both fit in ``max_tokens``."""
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def doc_windows(num_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each window: ``stride`` apart, the last ending at the last token."""
    spans, start = [], 0
    while True:
        length = min(window, num_tokens - start)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, stride)


def max_context_window(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """For each token, the window where ``min(left, right context) + 0.01 * length`` is highest
    (the first of equals), as BERT's ``_check_is_max_context``."""
    best = np.zeros(num_tokens, np.int32)
    best_score = np.full(num_tokens, -np.inf)
    for w, (start, length) in enumerate(spans):
        p = np.arange(start, start + length)
        score = np.minimum(p - start, start + length - 1 - p) + 0.01 * length
        better = score > best_score[p]
        best[p[better]], best_score[p[better]] = w, score[better]
    return best
