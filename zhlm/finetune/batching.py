"""Batches of featurized rows in a few static sequence lengths (length buckets), and a forward
pass over all of them in input order.

The kinds featurize every row at ``task.max_seq_length``, yet most rows are far shorter
(ChnSentiCorp's reviews fill 38% of 256 positions, LCQMC's pairs 22% of 128). Computing every
batch at the full length pays for the padding; a new length per batch compiles a new program
per batch. Between the two, every row goes to the smallest of a few lengths known up front
that holds its real tokens, every batch is drawn from one of them, and each jitted function
compiles once per length that has rows.

**The lengths** are ``task.length_buckets``, with ``task.max_seq_length`` always the last;
empty (the default) means the powers of two from 32 below ``max_seq_length``, then
``max_seq_length``. Doubling bounds the padding of every row by its own length (a bucket's
positions are under twice its shortest row's tokens) with a handful of programs: 3 at 128
tokens, 4 at 256, 5 at 512. Below 32 few rows of the shipped tasks fit (2-3% of LCQMC's and
MSRA NER's) and a step that short gains little, so 32 is the first. ``(max_seq_length,)``
turns buckets off.

**A row's length** is one past its last position whose ``attention_mask`` is 1, over every
sequence of the row (a multiple-choice row of [C,S] options takes its longest option).

**Which arrays are cut**: every array whose shape is ``input_ids``' ([N,S], or [N,C,S] for
multiple choice) is per-token and cut on its last axis to the bucket's length (ids, segments,
mask, per-token labels); the others pass as they are (one label per row, answer positions,
which point at real tokens and so lie inside the bucket).

**Rows per batch**: every batch has ``batch_size`` rows whatever its length (the optimizer sees
the same number of rows per step as without buckets); the last batch of a bucket is filled
with copies of its first row whose ``weight`` is 0, so they count in neither the loss nor the
outputs.

**Outputs** (:func:`run`) come back in input order, each with the rows' first axis. An output
is per-token when its token axis follows the input's length (found from the shapes the forward
pass gives at two lengths: two buckets run, else one batch more at the full length); it is
padded back to the full length with :data:`FLOAT_PAD` (floats: a logit that no softmax weighs
and no argmax or span search picks) or :data:`INT_PAD` (integers: the "no label" id), at
positions that hold no real token, which no kind's decode reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import jax
import numpy as np

from zhlm.errors import UserError

FIRST_BUCKET = 32  # the shortest default bucket (see the module docstring)
FLOAT_PAD = -1e9  # per-token float outputs beyond a row's bucket
INT_PAD = -1  # per-token integer outputs beyond a row's bucket


PACKED_INPUTS = ("segment_ids", "instance_starts")  # what packed rows add (finetune.packing)


def model_inputs(batch: dict) -> tuple:
    """The arrays a task model's ``__call__`` takes, in its order, from a batch."""
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def packed_inputs(batch: dict) -> dict:
    """The keyword inputs of packed rows (:mod:`zhlm.finetune.packing`) a batch has: none for
    unpacked rows, so a kind that never packs needs no such arguments."""
    return {name: batch[name] for name in PACKED_INPUTS if name in batch}


def bucket_lengths(length_buckets: Sequence[int], max_seq_length: int) -> tuple[int, ...]:
    """The sequence lengths of ``task.length_buckets`` (empty: powers of two from
    :data:`FIRST_BUCKET`), increasing, ``max_seq_length`` last."""
    if not length_buckets:
        powers = []
        length = FIRST_BUCKET
        while length < max_seq_length:
            powers.append(length)
            length *= 2
        return (*powers, max_seq_length)
    lengths = tuple(int(n) for n in length_buckets)
    if list(lengths) != sorted(set(lengths)) or lengths[0] < 1 or lengths[-1] > max_seq_length:
        raise UserError(
            f"config.task.length_buckets={lengths}: give increasing lengths from 1 to "
            f"task.max_seq_length={max_seq_length} (empty: powers of two)"
        )
    return lengths if lengths[-1] == max_seq_length else (*lengths, max_seq_length)


def row_lengths(arrays: dict) -> np.ndarray:
    """[N] one past the last real position of each row (over all its sequences)."""
    mask = np.asarray(arrays["attention_mask"])
    rows, width = len(mask), mask.shape[-1]
    ends = (mask.reshape(rows, -1, width) > 0) * np.arange(1, width + 1)
    return ends.max(axis=(1, 2)) if rows else np.zeros(0, np.int64)


@dataclasses.dataclass(frozen=True)
class Buckets:
    """Which bucket each row of a set of arrays goes to."""

    lengths: tuple[int, ...]  # increasing, the featurized length last
    of_row: np.ndarray  # [N] index into ``lengths``
    positions_per_token: int  # sequences per row: C for [N,C,S] inputs, else 1

    @classmethod
    def of(cls, arrays: dict, length_buckets: Sequence[int] = ()) -> Buckets:
        shape = arrays["input_ids"].shape
        lengths = bucket_lengths(length_buckets, shape[-1])
        of_row = np.searchsorted(lengths, row_lengths(arrays))
        return cls(lengths, of_row, int(np.prod(shape[1:-1], dtype=np.int64)))

    def rows(self) -> list[np.ndarray]:
        """The rows of each bucket, in input order."""
        return [np.flatnonzero(self.of_row == b) for b in range(len(self.lengths))]

    def plan(self, batch_size: int, rng: np.random.RandomState | None = None):
        """``[(length, rows)]``, one entry per batch of up to ``batch_size`` rows of one
        bucket. With ``rng`` (training): rows shuffled within each bucket, then the batches
        shuffled, so the order is a function of the generator's state; without it, the
        buckets in order and each bucket's rows in input order."""
        plan = []
        for length, rows in zip(self.lengths, self.rows(), strict=True):
            if rng is not None:
                rows = rng.permutation(rows)
            plan += [(length, rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
        if rng is not None:
            plan = [plan[i] for i in rng.permutation(len(plan))]
        return plan

    def batch(self, arrays: dict, entry, batch_size: int) -> dict:
        """The batch of a :meth:`plan` entry (:func:`batch`)."""
        length, rows = entry
        return batch(arrays, rows, batch_size, length)

    def num_batches(self, batch_size: int) -> int:
        return sum(-(-len(rows) // batch_size) for rows in self.rows())

    @property
    def programs(self) -> int:
        """Shapes a jitted function compiles for: the buckets with rows."""
        return sum(1 for rows in self.rows() if len(rows))

    def computed_positions(self, batch_size: int) -> int:
        """Token positions one pass computes, filled batches included."""
        per_bucket = zip(self.lengths, self.rows(), strict=True)
        batches = sum(-(-len(rows) // batch_size) * length for length, rows in per_bucket)
        return batches * batch_size * self.positions_per_token

    def describe(self) -> str:
        """``32/64/128 (rows 812/301/60)``."""
        counts = "/".join(str(len(rows)) for rows in self.rows())
        return f"{'/'.join(map(str, self.lengths))} (rows {counts})"


def batch(arrays: dict, rows: np.ndarray, batch_size: int, length: int | None = None) -> dict:
    """Rows ``rows`` (at most ``batch_size``) with per-token arrays cut to ``length`` (None:
    as featurized), filled to ``batch_size`` with copies of the first row of weight 0."""
    weight = np.zeros(batch_size, np.float32)
    weight[: len(rows)] = 1.0
    rows = np.concatenate([rows, np.full(batch_size - len(rows), rows[0], rows.dtype)])
    token_shape = arrays["input_ids"].shape
    out = {}
    for key, value in arrays.items():
        if length is not None and value.shape == token_shape:
            value = value[..., :length]  # a view: only the kept positions are copied
        out[key] = value[rows]
    return dict(out, weight=weight)


def batches(arrays: dict, batch_size: int, order: np.ndarray) -> Iterator[dict]:
    """Batches of rows ``order`` at the featurized length, all ``batch_size`` long."""
    for begin in range(0, len(order), batch_size):
        yield batch(arrays, order[begin : begin + batch_size], batch_size)


def run(
    forward: Callable, arrays: dict, batch_size: int, length_buckets: Sequence[int] = ()
) -> dict:
    """``forward(batch)`` over every row of ``arrays``, a bucket at a time (``length_buckets``
    as ``task.length_buckets``), on the host: each output's first axis is the rows' in input
    order, per-token outputs padded back to the featurized length."""
    buckets = Buckets.of(arrays, length_buckets)
    results = []
    for length, rows in buckets.plan(batch_size):
        out = jax.device_get(forward(batch(arrays, rows, batch_size, length)))
        results.append((length, rows, {k: v[: len(rows)] for k, v in out.items()}))
    token_axis = arrays["input_ids"].ndim - 1
    per_token = _per_token(forward, arrays, batch_size, results, token_axis)
    n, full = arrays["input_ids"].shape[0], arrays["input_ids"].shape[-1]
    outputs = {}
    for name, first in results[0][2].items():
        shape = [n, *first.shape[1:]]
        if name not in per_token:
            outputs[name] = np.empty(shape, first.dtype)
            for _, rows, out in results:
                outputs[name][rows] = out[name]
            continue
        shape[token_axis] = full
        pad = INT_PAD if np.issubdtype(first.dtype, np.integer) else FLOAT_PAD
        outputs[name] = np.full(shape, pad, first.dtype)
        for length, rows, out in results:
            outputs[name][(rows, *[slice(None)] * (token_axis - 1), slice(length))] = out[name]
    return outputs


# Whether an output is per-token depends on the model, not on the rows: once settled for an
# output signature (names, dtypes and shapes at one length), later single-length runs (short
# inputs to predict, a few at a time) need no extra pass at the full length.
_SETTLED: dict[tuple, frozenset[str]] = {}


def _per_token(forward, arrays, batch_size, results, token_axis) -> frozenset[str]:
    """The outputs whose token axis follows the input's length: compared between two lengths
    run, else (one length) with one more batch at the full length."""
    shapes = {length: {k: v.shape[1:] for k, v in out.items()} for length, _, out in results}
    full = arrays["input_ids"].shape[-1]

    def as_long(shape, length):
        return len(shape) >= token_axis and shape[token_axis - 1] == length

    (short, at_short), *others = shapes.items()
    candidates = {k for k, shape in at_short.items() if as_long(shape, short)}
    if set(shapes) == {full} or not candidates:
        return frozenset()  # nothing was cut, or nothing is as long as the input
    if others:
        long, at_long = others[0]
        return frozenset(k for k in candidates if as_long(at_long[k], long))
    signature = results[0][2]
    key = (short, full, *sorted((k, v.dtype.str, v.shape[1:]) for k, v in signature.items()))
    if key not in _SETTLED:
        whole = jax.device_get(forward(batch(arrays, results[0][1], batch_size)))
        _SETTLED[key] = frozenset(k for k in candidates if as_long(whole[k].shape[1:], full))
    return _SETTLED[key]
