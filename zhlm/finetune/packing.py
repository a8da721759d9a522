"""Packed rows for fine-tuning and prediction: several examples per row of ``max_seq_length``
tokens, one static shape, so a step computes real tokens and not padding.

Why: the kinds featurize every example at ``task.max_seq_length``, yet most are far shorter;
length buckets (:mod:`zhlm.finetune.batching`) leave 27-33% of the computed positions padding
on the shipped tasks and compile a program per bucket. Packed, an example keeps everything it
has alone: its tokens, token types and labels laid end to end with the others of its row, its
positions restarting at 0 and its attention within its own block (``segment_ids``, as
pretraining packs: :mod:`zhlm.data.packing`), so its outputs are its unpacked ones
(``tests/finetune/test_packing.py`` checks each kind to 1e-5 in float32).

**The read-out** is the one thing a kind adds (``TaskKind.readout``): ``instance`` (one output
per example, read at its own [CLS], whose position each row gives in ``instance_starts`` [R,K]:
classification, pair, regression), ``token`` (every token, as the row lays them: NER, whose
[CLS] and [SEP] carry no label), or None (not packed: MRC windows, which are nearly full
already, and multiple choice). Outputs come back per example in the layout an unpacked
forward pass gives them ([N,...] per instance, [N,S,...] per token, padded with
:data:`~zhlm.finetune.batching.FLOAT_PAD` / ``INT_PAD`` beyond the example's tokens), so decoding
does not know whether rows were packed.

**Which examples share a row** is the bin-packing pretraining uses
(:func:`zhlm.data.packing.best_fit`), with at most :func:`max_examples` = S/16 per row: fine-tuning
examples are shorter than pretraining's instances, and S/32 would hold LCQMC's pairs at 85% real
tokens (97% with S/16). Evaluation and prediction sort the examples longest first and keep every
row open (best-fit-decreasing: deterministic, the fewest rows); training packs each epoch's
shuffled order over a window of :data:`TRAIN_WINDOW` open rows, so the order stays random.

**Batch fields** of a packed batch of R rows: every per-token array of the examples ([N,S]
like ``input_ids``) as [R,S], padding ``input_ids``, ``token_type_ids`` and
``attention_mask`` 0 and any other field -1 (a label no loss reads); ``segment_ids`` [R,S] (the
slot of each token from 1, 0 padding), ``instance_starts`` [R,K] (each slot's first position,
0 when empty); the per-example arrays (``label`` [N]) as [R,K] (0 in an empty slot: finite,
weighed 0); and ``weight``: per slot [R,K] for an ``instance`` read-out, per row [R] for a
``token`` one (whose padding positions carry no label), 0 for the rows that fill a batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from zhlm.data.packing import best_fit
from zhlm.finetune import batching

SLOT_TOKENS = 16  # a row of S tokens holds at most S // SLOT_TOKENS examples
TRAIN_WINDOW = 64  # open rows a training example may go into (its epoch's order stays random)
READOUTS = ("instance", "token")
_TOKEN_PADS = {"input_ids": 0, "token_type_ids": 0, "attention_mask": 0}  # else -1


def max_examples(max_seq_length: int) -> int:
    """K: the examples (slots) a packed row of ``max_seq_length`` tokens holds at most."""
    return max(1, max_seq_length // SLOT_TOKENS)


def packs(kind, task) -> bool:
    """Whether ``task`` runs packed: ``task.pack`` and a kind with a read-out."""
    return bool(task.pack) and kind.readout is not None


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each example of a set went: ``members[r]`` the examples of packed row ``r`` in
    their order; per example its ``row``, ``slot`` and ``start`` (first position in the row)
    and ``length`` (real tokens, from ``attention_mask``)."""

    members: list[np.ndarray]
    row: np.ndarray
    slot: np.ndarray
    start: np.ndarray
    length: np.ndarray
    max_seq_length: int

    @classmethod
    def of(cls, lengths, max_seq_length: int, order=None, window: int | None = None) -> Layout:
        """Packs examples of ``lengths`` in ``order`` (None: longest first, the shortest
        index first among equals, every row open: best-fit-decreasing) over ``window`` open
        rows (None: all)."""
        lengths = np.asarray(lengths, np.int64)
        if order is None:
            order = np.argsort(-lengths, kind="stable")
        order = np.asarray(order)
        rows = best_fit(lengths[order], max_seq_length, max_examples(max_seq_length), window)
        members = [order[np.asarray(r, np.int64)] for r in rows]
        n = len(lengths)
        row, slot, start = (np.zeros(n, np.int64) for _ in range(3))
        for r, examples in enumerate(members):
            row[examples] = r
            slot[examples] = np.arange(len(examples))
            start[examples] = np.cumsum(lengths[examples]) - lengths[examples]
        return cls(members, row, slot, start, lengths, max_seq_length)

    @property
    def num_rows(self) -> int:
        return len(self.members)

    def real_token_fraction(self) -> float:
        """The share of the rows' positions that hold real tokens."""
        return float(self.length.sum() / max(1, self.num_rows * self.max_seq_length))


def rows_per_step(batch_size: int, layout: Layout, multiple: int = 1) -> int:
    """Training's rows per step: as many as hold ``batch_size`` examples at ``layout``'s mean
    examples per row (rounded, at least one), a multiple of ``multiple`` (data-parallel
    devices), so that a step sees about the examples it does unpacked."""
    rows = max(1, round(batch_size * layout.num_rows / max(1, len(layout.length))))
    return -(-rows // multiple) * multiple


def forward_rows(batch_size: int, layout: Layout, multiple: int = 1) -> int:
    """Evaluation's and prediction's rows per batch: :func:`rows_per_step` rounded up to a power
    of two, and no more than the rows need (a power of two too), so that inputs of any size
    compile a few shapes, never one per input."""
    want = rows_per_step(batch_size, layout)
    rows = min(_power_of_two(want), _power_of_two(layout.num_rows))
    return -(-rows // multiple) * multiple


class Epochs:
    """Training's packed rows: each epoch's examples in a shuffled order (a function of the
    seed's generator, as buckets shuffle), packed online over :data:`TRAIN_WINDOW` open rows,
    then spread evenly over the epoch's steps, :attr:`rows_per_step` rows a step (the last of
    them empty, weight 0, where the epoch's rows run out), so every step has one shape and
    every epoch as many steps: the most any of the run's epochs needs, found by packing the
    epochs of every seed up front (``seeds``, ``epochs``), a fraction of a second for 45k
    examples. :func:`rows_per_step` sets the rows from the mean examples a row over those
    epochs, so that a step holds about ``batch_size`` examples. The interface is
    :class:`~zhlm.finetune.batching.Buckets`' (``plan``, ``batch``, ``num_batches``, ...), so
    the loop runs either."""

    def __init__(self, arrays, batch_size, readout, seeds, epochs, multiple=1):
        self.lengths = batching.row_lengths(arrays)
        self.max_seq_length = int(arrays["input_ids"].shape[-1])
        self.readout = readout
        rows = []
        for seed in seeds:
            rng = np.random.RandomState(seed)
            rows += [self._layout(rng).num_rows for _ in range(epochs)]
        examples = len(self.lengths) * len(rows)
        self.rows_per_step = max(1, round(batch_size * sum(rows) / max(1, examples)))
        self.rows_per_step = -(-self.rows_per_step // multiple) * multiple
        self.steps = max(-(-n // self.rows_per_step) for n in rows)
        self.mean_rows = sum(rows) / len(rows)

    def _layout(self, rng) -> Layout:
        order = rng.permutation(len(self.lengths))
        return Layout.of(self.lengths, self.max_seq_length, order, TRAIN_WINDOW)

    def plan(self, batch_size: int, rng: np.random.RandomState) -> list:
        """``[(layout, rows)]``: the epoch's packing and each step's rows of it."""
        layout = self._layout(rng)
        bounds = np.linspace(0, layout.num_rows, self.steps + 1).round().astype(int)
        return [(layout, range(a, b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def batch(self, arrays: dict, entry, batch_size: int) -> dict:
        """The packed batch of a :meth:`plan` entry (``batch_size`` is the rows' business)."""
        layout, rows = entry
        return batch(arrays, layout, rows, self.rows_per_step, self.readout)

    def num_batches(self, batch_size: int) -> int:
        return self.steps

    @property
    def programs(self) -> int:
        return 1

    def computed_positions(self, batch_size: int) -> int:
        """Token positions an epoch computes, empty rows included."""
        return self.steps * self.rows_per_step * self.max_seq_length

    def describe(self) -> str:
        """``packed rows of 128 (8 examples a row at most, 4.4 on average), 7 a step``."""
        return (
            f"packed rows of {self.max_seq_length} ({max_examples(self.max_seq_length)} examples "
            f"a row at most, {len(self.lengths) / self.mean_rows:.1f} on average), "
            f"{self.rows_per_step} a step"
        )


def _power_of_two(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _token_places(layout: Layout, rows, num_rows: int):
    """``(example, position, segment)`` [num_rows, S] of each place of packed rows ``rows``
    (example -1 where none is), and ``instance_starts`` [num_rows, K]."""
    width, k = layout.max_seq_length, max_examples(layout.max_seq_length)
    example = np.full((num_rows, width), -1, np.int64)
    position = np.zeros((num_rows, width), np.int64)
    segment = np.zeros((num_rows, width), np.int32)
    starts = np.zeros((num_rows, k), np.int32)
    for i, r in enumerate(rows):
        for slot, e in enumerate(layout.members[r]):
            begin, n = layout.start[e], layout.length[e]
            example[i, begin : begin + n] = e
            position[i, begin : begin + n] = np.arange(n)
            segment[i, begin : begin + n] = slot + 1
            starts[i, slot] = begin
    return example, position, segment, starts


def batch(arrays: dict, layout: Layout, rows, num_rows: int, readout: str) -> dict:
    """The packed batch of ``layout``'s rows ``rows`` (at most ``num_rows``), filled to
    ``num_rows`` with empty rows of weight 0 (fields: the module docstring)."""
    example, position, segment, starts = _token_places(layout, rows, num_rows)
    k = starts.shape[1]
    slots = np.full((num_rows, k), -1, np.int64)
    for i, r in enumerate(rows):
        slots[i, : len(layout.members[r])] = layout.members[r]
    token_shape = arrays["input_ids"].shape
    real = example >= 0
    out = {}
    for name, value in arrays.items():
        if value.shape == token_shape:
            picked = value[np.maximum(example, 0), position]
            out[name] = np.where(real, picked, _TOKEN_PADS.get(name, -1)).astype(value.dtype)
        else:
            picked = value[np.maximum(slots, 0)]
            empty = (slots < 0).reshape(slots.shape + (1,) * (picked.ndim - 2))
            out[name] = np.where(empty, np.zeros((), value.dtype), picked)
    out["segment_ids"], out["instance_starts"] = segment, starts
    if readout == "instance":
        out["weight"] = (slots >= 0).astype(np.float32)
    else:
        out["weight"] = np.zeros(num_rows, np.float32)
        out["weight"][: len(rows)] = [float(len(layout.members[r]) > 0) for r in rows]
    return out


def run(forward: Callable, arrays: dict, batch_size: int, readout: str, multiple: int = 1):
    """``forward(batch)`` over every example of ``arrays``, packed best-fit-decreasing
    (:meth:`Layout.of`) in batches of :func:`forward_rows`, on the host: each output per
    example in input order, as an unpacked forward pass gives it (module docstring)."""
    layout = Layout.of(batching.row_lengths(arrays), arrays["input_ids"].shape[-1])
    num_rows = forward_rows(batch_size, layout, multiple)
    n, width = len(layout.length), layout.max_seq_length
    outputs: dict[str, np.ndarray] = {}
    for begin in range(0, layout.num_rows, num_rows):
        rows = range(begin, min(begin + num_rows, layout.num_rows))
        out = jax.device_get(forward(batch(arrays, layout, rows, num_rows, readout)))
        if readout == "instance":
            examples = np.concatenate([layout.members[r] for r in rows])
            at = (layout.row[examples] - begin, layout.slot[examples])
            for name, value in out.items():
                if name not in outputs:
                    outputs[name] = np.empty((n, *value.shape[2:]), value.dtype)
                outputs[name][examples] = value[at]
            continue
        example, position, _, _ = _token_places(layout, rows, num_rows)
        real = example >= 0
        for name, value in out.items():
            if name not in outputs:
                integer = np.issubdtype(value.dtype, np.integer)
                pad = batching.INT_PAD if integer else batching.FLOAT_PAD
                outputs[name] = np.full((n, width, *value.shape[2:]), pad, value.dtype)
            outputs[name][example[real], position[real]] = value[real]
    return outputs


def computed_positions(arrays: dict, batch_size: int, multiple: int = 1) -> tuple[int, int]:
    """``(positions, rows)``: the token positions :func:`run` computes for ``arrays`` (empty
    rows of the last batch included) and its rows a batch."""
    layout = Layout.of(batching.row_lengths(arrays), arrays["input_ids"].shape[-1])
    rows = forward_rows(batch_size, layout, multiple)
    return -(-layout.num_rows // rows) * rows * layout.max_seq_length, rows


def forward_all(kind, task, forward: Callable, arrays: dict, batch_size: int, multiple: int = 1):
    """Outputs of ``forward(batch)`` for every row of ``arrays``, in input order: packed
    (:func:`run`) where :func:`packs`, else in length buckets (:func:`batching.run` over
    ``task.length_buckets``); evaluation and prediction both come here. ``multiple``: the
    data-parallel devices a packed batch's rows are split over."""
    if packs(kind, task):
        return run(forward, arrays, batch_size, kind.readout, multiple)
    return batching.run(forward, arrays, batch_size, task.length_buckets)
