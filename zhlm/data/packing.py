"""Packing: several short instances in one fixed-length row, so a step computes real tokens.

Why: the recipes' instances are often far shorter than ``max_seq_length`` (short documents,
``short_seq_prob`` targets, NSP's random B, the last sequence of a document), and every padded
position costs as much as a real one. Packed, a row holds instances one after the other, each
exactly as it was built (its own ``[CLS] ... [SEP]``, token types, label), and the model keeps
them apart: position ids restart at 0 for each instance, attention is block-diagonal (a token
attends only to the tokens of its own instance, as t5x and MaxText pack), and the sentence
head reads each instance's own [CLS]. So an instance's outputs and losses are those it has
unpacked (tests/models/test_packed_model.py checks them to 1e-5 in float32).

Where: at record-building time (``data.pack``), on each shard's instances in their order, so
the records have static shapes and the host does nothing per step. Changing ``data.pack``
changes the dataset (its cache key and its name, ``..._packed``).

How: greedy best-fit in record order over a window of open rows (``WINDOW``): an instance
goes into the open row with the least room that still holds its tokens and has a free slot (the
oldest of equals), else opens a row; when more than ``WINDOW`` rows are open, the oldest is
closed. Best-fit keeps the roomy rows open for the longer instances that only they can take,
and the wider window finds more of them (fewer rows than first-fit over 64 rows for nearly every
recipe and corpus, ``python tools/bench.py tokens``), for a scan of the window per instance, a
small cost beside building the instances (:func:`best_fit`, which fine-tuning's packing,
``zhlm.finetune.packing``, shares). The result depends only on the instances and their
order. An instance is never split. A row holds at
most ``max_instances(S)`` = S // 32 instances (at least 1): slots cost the sentence head one
gathered vector each. The limit binds only where instances are very short (ALBERT's and
SpanBERT's rows of the bundled sample: twice the slots would save 0.1-1.5% of their rows), never
for RoBERTa-wwm.

``data.pack`` is on by default (``zhlm.defaults``): at 128 and 512 tokens it lifts every
recipe's real-token share above 90%, except FULL-SENTENCES (RoBERTa-wwm) at 128 tokens,
85-88%. That is the most any packing of those instances allows: a FULL-SENTENCES row ends where
the next whole sentence does not fit, so 87% of its instances (88% on the bundled People's
Daily sample) are longer than half a row, no two of them can share one, and each such instance
is a row of its own whatever the algorithm. The short instances could fill only part of those
rows' leftover room (on the CLUE sample: 36.5k tokens of short instances for 124k tokens of
room), which caps the share at 88.5% there and 86.0% on the bundled sample. Packing never
splits an instance, so reaching 90% there would take a different instance, not a different
packing.

A packed record has the instances' per-token fields laid end to end, padding after, plus
``segment_ids`` [S] (1..K: the instance of each token, 0: padding), ``instance_starts`` [K] (the
position of each instance's [CLS]; 0 in an empty slot) and, for the sentence-pair formats,
``sentence_label`` [K] (-1 in an empty slot, which the loss weighs 0). Unit ids (``word_ids``,
``phrase_ids``, ``entity_ids``) continue from one instance to the next, so they stay unique and
in order of appearance within the row; masking never joins tokens of two instances anyway, since
units stop at [CLS] and [SEP] (``zhlm.masking.schemes``).
"""

import bisect

import numpy as np

from zhlm.data.annotate import UNIT_FIELDS

WINDOW = 256  # open rows an instance may go into: more packs tighter, costs a scan per instance
SLOT_FIELDS = ("instance_starts", "sentence_label")  # [K] per row; sentence_label if present


def max_instances(max_seq_length: int) -> int:
    """K: instance slots of a packed row."""
    return max(1, max_seq_length // 32)


def best_fit(lengths, capacity: int, slots: int, window: int | None = WINDOW) -> list[list[int]]:
    """The bin-packing of pretraining and fine-tuning: which items (indices into ``lengths``,
    each at most ``capacity``) go into which row, each row's items in the order they came.

    Greedy best-fit in the order of ``lengths``: an item goes into the open row with the least
    room that still holds it (the oldest of equals), else opens a row; a row closes when it is
    full or holds ``slots`` items, and, with a ``window``, the oldest open row closes when more
    than ``window`` are open (None: every row stays open, which over lengths sorted longest
    first is best-fit-decreasing). Rows come in the order they closed, then the open ones in
    the order they opened, so the result depends only on the lengths and their order. Open
    rows are kept sorted by room, so an item costs a binary search, not a scan of the window.
    """
    members: list[list[int]] = []
    used: list[int] = []
    by_room: list[tuple[int, int]] = []  # (used, -row) of the open rows, increasing
    open_rows: dict[int, None] = {}  # the open rows in the order they opened
    done: list[int] = []

    def close(row):
        del by_room[bisect.bisect_left(by_room, (used[row], -row))]
        del open_rows[row]
        done.append(row)

    for item, n in enumerate(lengths):
        n = int(n)
        if n > capacity:
            raise ValueError(f"an item of {n} tokens in rows of {capacity}")
        # The last open row with used <= capacity - n: the fullest that fits, oldest of equals.
        at = bisect.bisect_right(by_room, (capacity - n, 0)) - 1
        if at >= 0:
            row = -by_room.pop(at)[1]
        else:
            row = len(members)
            members.append([])
            used.append(0)
            open_rows[row] = None
            if window is not None and len(open_rows) > window:
                close(next(iter(open_rows)))
        members[row].append(item)
        used[row] += n
        bisect.insort(by_room, (used[row], -row))
        if len(members[row]) == slots or used[row] == capacity:
            close(row)
    done.extend(open_rows)
    return [members[row] for row in done]


def pack(rows: list[dict], max_seq_length: int, pad_id: int) -> list[dict]:
    """Packs unpacked instances (``zhlm.data.instances.Writer`` rows, in record order) into
    rows of ``max_seq_length`` tokens, ``input_ids`` padded with ``pad_id`` (see the module
    docstring)."""
    lengths = [int(row["attention_mask"].sum()) for row in rows]
    k = max_instances(max_seq_length)
    return [
        _join([rows[i] for i in members], max_seq_length, k, pad_id)
        for members in best_fit(lengths, max_seq_length, k)
    ]


def _join(members, length, k, pad_id):
    """One packed row from its instances (each's real tokens are its first ones); padding as
    the Writer pads: ``pad_id``, type 0, mask 0, every id field -1."""
    first = members[0]
    pads = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0}
    out = {
        name: np.full(length, pads.get(name, -1), np.int32)
        for name, value in first.items()
        if _token(value)
    }
    out["segment_ids"] = np.zeros(length, np.int32)
    out["instance_starts"] = np.zeros(k, np.int32)
    if "sentence_label" in first:
        out["sentence_label"] = np.full(k, -1, np.int32)
    pos, next_unit = 0, dict.fromkeys(UNIT_FIELDS, 0)
    for slot, row in enumerate(members):
        n = int(row["attention_mask"].sum())
        for name in out:
            if name in row and _token(row[name]):
                values = row[name][:n]
                if name in next_unit:
                    values = np.where(values >= 0, values + next_unit[name], -1)
                    next_unit[name] = max(next_unit[name], int(values.max()) + 1)
                out[name][pos : pos + n] = values
        out["segment_ids"][pos : pos + n] = slot + 1
        out["instance_starts"][slot] = pos
        if "sentence_label" in row:
            out["sentence_label"][slot] = row["sentence_label"]
        pos += n
    return out


def _token(value) -> bool:
    return np.ndim(value) == 1 and not np.isscalar(value)
