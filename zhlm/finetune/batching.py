"""Fixed-size batches of featurized rows, and a forward pass over all of them.

Shapes are static: every batch has ``batch_size`` rows, the last one filled with copies of
row 0 whose ``weight`` is 0 (they count in neither the loss nor the outputs), so each jitted
function compiles once.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np


def batches(arrays: dict, batch_size: int, order: np.ndarray):
    """Batches of rows ``order``, all ``batch_size`` long: the last is filled with copies of
    row 0 whose ``weight`` is 0."""
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        weight = np.zeros(batch_size, np.float32)
        weight[: len(rows)] = 1.0
        rows = np.pad(rows, (0, batch_size - len(rows)))
        yield dict({k: v[rows] for k, v in arrays.items()}, weight=weight)


def run(forward: Callable, arrays: dict, batch_size: int) -> dict:
    """``forward(batch)`` over every row of ``arrays`` in order, on the host, padding rows
    dropped: each output's first axis is the rows'."""
    outputs = []
    for batch in batches(arrays, batch_size, np.arange(len(arrays["input_ids"]))):
        out = jax.device_get(forward(batch))
        outputs.append({k: v[batch["weight"] > 0] for k, v in out.items()})
    return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}
