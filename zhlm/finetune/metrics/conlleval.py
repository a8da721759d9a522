"""Entity chunks, tagging schemes and the conlleval entity-level metric for NER.

Why a module of its own: the papers we compare against (ERNIE, Chinese-BERT-wwm) report MSRA-NER
F1 computed the conlleval way, and how a tag sequence is cut into entities decides that number.
Ill-formed sequences (an ``I-PER`` after ``O``, a ``B-PER I-LOC``) are common in model output and
occur in the MSRA files themselves; conlleval.pl, and ``seqeval`` in its default mode, read them
with one fixed set of rules: an entity ends and another starts wherever the letter or the type
says so, so ``O I-PER I-PER`` is one PER entity and ``B-PER I-LOC`` is a PER and a LOC.
:func:`entities` implements exactly those rules (``tests/finetune/kinds/test_ner.py`` checks it
against ``seqeval`` on random sequences), and every scheme is converted through it, so reading a
file and scoring it agree on what its entities are.

Schemes: ``bio`` (IOB2: every entity starts with ``B-``), ``iob1`` (``B-`` only where an entity
directly follows one of the same type), ``bioes`` (``S-`` single, ``B-``/``I-``/``E-``) and
``bmes`` (``M-`` in place of ``I-``). Spans are ``(type, start, end)`` with ``end`` exclusive, so
``text[start:end]`` is the entity. Scores are percentages, as results.json reports accuracy.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence

from zhlm.errors import UserError

SCHEMES = ("bio", "iob1", "bioes", "bmes")
# The letters each scheme may use besides O.
LETTERS = {"bio": "BI", "iob1": "BI", "bioes": "BIES", "bmes": "BMES"}

Span = tuple[str, int, int]


@functools.lru_cache(maxsize=4096)
def parse_tag(tag: str) -> tuple[str, str]:
    """``(letter, type)`` of a tag: ``("O", "")`` for ``O``, ``("B", "PER")`` for ``B-PER``.
    Raises UserError for any other shape (a suffix form ``PER-B``, an empty type, ``X-PER``)."""
    if tag == "O":
        return "O", ""
    letter, dash, type_ = tag.partition("-")
    if len(letter) != 1 or letter not in "BIEMS" or not dash or not type_:
        raise UserError(f"tag {tag!r} is neither O nor B-, I-, E-, S- or M- and a type")
    return letter, type_


def entities(tags: Sequence[str]) -> list[Span]:
    """The ``(type, start, end)`` chunks of one tag sequence, by conlleval's rules (``seqeval``'s
    default mode); ``M-`` reads as ``I-``. Every non-O tag belongs to exactly one chunk."""
    chunks = []
    prev, prev_type, begin, last = "O", "", 0, -1
    # Only non-O tags can open or continue a chunk, and an O closes any open one: so the O
    # runs (most of a sentence) are skipped, seen only as a gap between two positions.
    for i in itertools.compress(range(len(tags)), map("O".__ne__, tags)):
        if i != last + 1 and prev != "O":
            chunks.append((prev_type, begin, last + 1))
            prev, prev_type = "O", ""
        letter, type_ = parse_tag(tags[i])
        letter = "I" if letter == "M" else letter
        if _chunk_ends(prev, letter, prev_type, type_):
            chunks.append((prev_type, begin, i))
        if _chunk_starts(prev, letter, prev_type, type_):
            begin = i
        prev, prev_type, last = letter, type_, i
    if prev != "O":
        chunks.append((prev_type, begin, last + 1))
    return chunks


def _chunk_ends(prev: str, letter: str, prev_type: str, type_: str) -> bool:
    """Whether the chunk holding the previous tag ends before this one (conlleval endOfChunk)."""
    if prev in "ES":
        return True
    if prev in "BI" and letter in "BSO":
        return True
    return prev != "O" and prev_type != type_


def _chunk_starts(prev: str, letter: str, prev_type: str, type_: str) -> bool:
    """Whether this tag opens a chunk (conlleval startOfChunk, with seqeval's S- rules)."""
    if letter in "BS":
        return True
    if prev in "ESO" and letter in "IE":
        return True
    return letter != "O" and prev_type != type_


def encode(spans: Iterable[Span], length: int, scheme: str = "bio") -> list[str]:
    """The tags of ``length`` characters holding ``spans`` (sorted, not overlapping) in
    ``scheme``; the canonical form, so ``entities(encode(s, n, scheme)) == s`` for every scheme."""
    check_scheme(scheme)
    tags = ["O"] * length
    last_end, last_type = -1, None
    for type_, start, end in spans:
        if not 0 <= start < end <= length or start < last_end:
            raise ValueError(f"span {(type_, start, end)} is outside 0..{length} or overlaps")
        tags[start:end] = _span_tags(type_, end - start, scheme, last_end == start, last_type)
        last_end, last_type = end, type_
    return tags


def _span_tags(type_: str, n: int, scheme: str, touches_previous: bool, previous_type) -> list:
    if scheme == "bio":
        return [f"B-{type_}"] + [f"I-{type_}"] * (n - 1)
    if scheme == "iob1":
        # B- only to separate an entity from a preceding one of the same type.
        first = "B" if touches_previous and previous_type == type_ else "I"
        return [f"{first}-{type_}"] + [f"I-{type_}"] * (n - 1)
    if n == 1:
        return [f"S-{type_}"]
    middle = "I" if scheme == "bioes" else "M"
    return [f"B-{type_}"] + [f"{middle}-{type_}"] * (n - 2) + [f"E-{type_}"]


def to_bio(tags: Sequence[str]) -> list[str]:
    """Any scheme's tags as BIO, through their conlleval chunks."""
    return encode(entities(tags), len(tags), "bio")


def check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise UserError(f"unknown tagging scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")


def detect_scheme(tag_seqs: Iterable[Sequence[str]], where: str = "the tags") -> str:
    """The scheme of a whole file's tags. ``M-`` means bmes and ``E-``/``S-`` bioes (both
    together with ``I-`` is an error), unless at most 5% of the entities end in ``E-``/``S-``:
    those few are then ill-formed entities of a B/I file (one stray ``E-`` does not make every
    multi-character entity of a BIO file ill-formed). With only ``B-``/``I-`` the entity starts
    decide: in BIO they are ``B-``, in IOB1 ``I-`` (``B-`` only after an entity of the same
    type); a few of the other kind are ill-formed entities of the majority scheme, more than 5%
    is ambiguous."""
    letters: set[str] = set()
    b_starts = i_starts = es_ends = total = 0
    for tags in tag_seqs:
        letters.update(parse_tag(tag)[0] for tag in set(tags))
        last_end, last_type = -1, None
        for type_, start, end in entities(tags):
            total += 1
            es_ends += tags[end - 1][0] in "ES"
            if tags[start][0] == "I":
                i_starts += 1
            elif last_end != start or last_type != type_:
                b_starts += tags[start][0] == "B"
            last_end, last_type = end, type_
    if "M" in letters and "I" in letters:
        raise UserError(f"{where}: both I- and M- tags; cannot tell bioes from bmes")
    if "M" in letters:
        return "bmes"
    if letters & {"E", "S"} and es_ends > 0.05 * total:
        return "bioes"
    if i_starts <= 0.05 * (b_starts + i_starts):
        return "bio"
    if b_starts <= 0.05 * (b_starts + i_starts):
        return "iob1"
    raise UserError(
        f"{where}: {b_starts} entities start with B- and {i_starts} with I-, so neither BIO nor "
        "IOB1 fits; give the scheme explicitly (bio or iob1)"
    )


def scores(gold_tag_seqs: Sequence[Sequence[str]], pred_tag_seqs: Sequence[Sequence[str]]) -> dict:
    """Entity-level precision, recall and F1 in percent: an entity counts only with its exact
    span and type. ``{"micro": {...}, "by_type": {type: {...}}}``, each ``{"precision",
    "recall", "f1", "gold", "predicted", "correct"}``; 0 where a denominator is 0 (as seqeval)."""
    if len(gold_tag_seqs) != len(pred_tag_seqs):
        raise ValueError(f"{len(gold_tag_seqs)} gold sequences, {len(pred_tag_seqs)} predicted")
    gold, pred = set(), set()
    for i, (g, p) in enumerate(zip(gold_tag_seqs, pred_tag_seqs, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sequence {i}: {len(g)} gold tags, {len(p)} predicted")
        gold.update((type_, i, s, e) for type_, s, e in entities(g))
        pred.update((type_, i, s, e) for type_, s, e in entities(p))
    types = sorted({span[0] for span in gold | pred})
    by_type = {
        t: _prf({s for s in gold if s[0] == t}, {s for s in pred if s[0] == t}) for t in types
    }
    return {"micro": _prf(gold, pred), "by_type": by_type}


def _prf(gold: set, pred: set) -> dict:
    correct = len(gold & pred)
    precision = 100 * correct / len(pred) if pred else 0.0
    recall = 100 * correct / len(gold) if gold else 0.0
    total = precision + recall
    f1 = 2 * precision * recall / total if total else 0.0
    return dict(
        precision=precision,
        recall=recall,
        f1=f1,
        gold=len(gold),
        predicted=len(pred),
        correct=correct,
    )
