"""Named-entity recognition data: read tag or span files, write predicted entities.

Why characters are the unit: MSRA-NER, People's Daily and CLUENER tag each character, and the
metric (:mod:`zhlm.finetune.metrics.conlleval`) compares entities as character spans. So an
example is its text and one BIO tag per character, whatever scheme the file used (the scheme is
found from the tags, or given, and converted through conlleval chunks: an ill-formed ``I-``
after ``O`` becomes the ``B-`` that conlleval would read there, and the report names it with
file and line).

Features, windows and merging predictions back are in :mod:`zhlm.finetune.kinds.ner.features`;
tag schemes, conlleval chunks and the metric in :mod:`zhlm.finetune.metrics.conlleval`. This
module reads the files and writes predictions as JSON lines of entity spans with their text.

``tests/finetune/kinds/test_ner.py`` checks all of this, and reads the real MSRA files.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from collections.abc import Iterator, Sequence

from zhlm.errors import UserError
from zhlm.finetune.metrics import conlleval
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.report import (
    BAD_SPAN,
    EMPTY_TEXT,
    ILL_FORMED_ENTITY,
    MALFORMED_LINE,
    MISSING_FIELD,
    OVERLAPPING_SPAN,
    SPAN_TEXT_MISMATCH,
    UNKNOWN_TAG,
    WORD_POSITION,
    ReadReport,
    counted,
    finish,
    json_error,
    lines,
)
from zhlm.finetune.readers.rows import PLAIN  # the same plain text format: a sentence a line

Path = str | os.PathLike


@dataclasses.dataclass(frozen=True)
class NerExample:
    guid: str
    text: str
    tags: tuple[str, ...] = ()  # BIO, one per character of text
    line: int = 0  # the first line of the sentence (tag files) or its line (JSON lines)


@dataclasses.dataclass
class NerReadReport(ReadReport):
    """A :class:`ReadReport` that also says which scheme the file was read as."""

    scheme: str = ""

    def summary(self, max_issues: int = 5) -> str:
        first, newline, rest = super().summary(max_issues).partition("\n")
        return f"{first} (scheme {self.scheme})" + newline + rest


# ---------------------------------------------------------------------------------- reading


class NerReader(Reader):
    """Tag files, CLUENER span lines, or plain sentences to predict; examples in memory are
    texts whose tags are all ``O``."""

    formats = ("tagged", "spans_jsonl", PLAIN)
    example_type = NerExample

    def read(self, path, task, require_label=True):
        if task.format == "tagged":  # reads the file twice: the scheme first, then sentences
            return iter_tagged(path, task.scheme)
        if task.format == PLAIN:
            return iter_plain(path, require_label)
        return iter_spans_jsonl(path)

    def describe(self, path, task):
        return (
            "format tagged (char<TAB>tag lines, a blank line after each sentence), "
            'spans_jsonl (JSON lines with a "text") or text (a sentence a line, to predict): '
            "pass the one that fits, --config.task.format=NAME"
        )

    def examples_from(self, records, task):
        # No tags to read: each character's is O, as in a spans_jsonl record without a label.
        examples = super().examples_from(records, task)
        return [dataclasses.replace(e, tags=("O",) * len(e.text)) for e in examples]


def read_tagged(path: Path, scheme: str = "auto") -> tuple[list[NerExample], NerReadReport]:
    """``char<TAB>tag`` (or ``char tag``) lines, a blank line after each sentence. ``scheme`` is
    one of ``conlleval.SCHEMES`` or ``auto`` (:func:`conlleval.detect_scheme`). A sentence
    with a bad line (field count, a token that is not one character, a tag outside the scheme)
    is skipped; ill-formed entities are kept as conlleval reads them and reported."""
    examples, report = iter_tagged(path, scheme)
    return finish(list(examples), report)


def iter_tagged(path: Path, scheme: str = "auto") -> tuple[Iterator[NerExample], NerReadReport]:
    """:func:`read_tagged` a sentence at a time, in memory bounded by the longest sentence:
    ``(examples, report)``, the report complete once the examples are. A scheme left to
    ``auto`` is found first, from a pass over the whole file that keeps only tag counts."""
    if scheme != "auto":
        conlleval.check_scheme(scheme)
    report = NerReadReport(os.fspath(path))
    detected = scheme == "auto"
    if detected:  # the first pass's bad lines are reported by the second
        tag_seqs = (tags for _, _, tags in _tagged_sentences(path, NerReadReport(report.path)))
        scheme = conlleval.detect_scheme(tag_seqs, report.path)
    report.scheme = scheme
    sentences = ((*s, conlleval.entities(s[2])) for s in _tagged_sentences(path, report))
    return counted(_tagged_examples(path, sentences, detected, report), report), report


def _tagged_examples(path, sentences, detected, report) -> Iterator[NerExample]:
    """The examples of ``(first line, characters, tags, entities)`` sentences in BIO."""
    for first, chars, tags, entities in sentences:
        # A detected scheme has every letter the file uses; a given one may not.
        if not detected and _outside_scheme(tags, report.scheme, first, report):
            continue
        bio = _to_bio(tags, entities, report.scheme, first, report)
        guid = f"{os.path.basename(path)}:{first}"
        yield NerExample(guid, "".join(chars), tuple(bio), first)


def _tagged_sentences(path: Path, report: ReadReport) -> Iterator[tuple[int, list, list]]:
    """``(first line number, characters, tags)`` of each sentence without a bad line; a
    sentence with one is reported once, at its first bad line. MSRA train has 2 million lines,
    so a well-formed sentence is checked by one regular expression, not line by line."""
    for line, block in _blocks(path):
        if _GOOD_SENTENCE.fullmatch(block):
            rows = block.split("\n")
            yield line, [row[0] for row in rows], [row[2:] for row in rows]
        else:
            yield from _checked_sentence(block.split("\n"), line, report)


def _blocks(path: Path) -> Iterator[tuple[int, str]]:
    """``(first line number, text)`` of each block of lines between blank lines, from text
    read 64 KiB at a time."""
    line, pending = 1, ""
    for text in itertools.chain(_text_pieces(path), [None]):
        parts = _SENTENCE_BREAK.split(pending + (text or ""))
        # Until the file ends, the last block may go on in the next piece, and so may the
        # break before it: both wait.
        keep = 0 if text is None else min(len(parts), 2)
        done = len(parts) - keep
        for i in range(0, done, 2):
            if parts[i].strip():
                yield line, parts[i]
            line += parts[i].count("\n") + (parts[i + 1].count("\n") if i + 1 < done else 0)
        pending = "".join(parts[done:])


# One blank line or more (lines of spaces and tabs count as blank) between sentences.
_SENTENCE_BREAK = re.compile(r"(\n(?:[ \t]*\n)+)")
# Lines of one character (not an undecodable byte), a tab and a tag that parse_tag takes.
_LINE = r"[^\t\n\udc80-\udcff]\t(?:O|[BIEMS]-[^\s\udc80-\udcff]+)"
_GOOD_SENTENCE = re.compile(rf"{_LINE}(?:\n{_LINE})*")


def _checked_sentence(rows: list[str], first: int, report: ReadReport):
    """The sentence of ``rows`` checked line by line: nothing if it is a ``-DOCSTART-``
    marker, nothing (reported) if a line is bad, else ``(first, chars, tags)``."""
    while rows and not rows[-1].strip():
        rows.pop()  # blank lines at the end of the file
    while rows and not rows[0].strip():
        rows, first = rows[1:], first + 1  # and at its start
    if len(rows) == 1 and rows[0].startswith("-DOCSTART-"):
        return
    positions = sum(1 for text in rows if _WORD_POSITION.match(text))
    if positions:
        message = f"characters with a word-position digit (Weibo NER's 字0): {positions}, dropped"
        report.add(WORD_POSITION, first, message, dropped=False)
    chars, tags, bad = [], [], []
    for number, text in enumerate(rows, start=first):
        char, tag, problem = _parse_line(text)
        if problem:
            bad.append((number, *problem))
            continue
        chars.append(char)
        tags.append(tag)
    if not bad:
        yield first, chars, tags
        return
    number, kind, message = bad[0]
    if len(bad) > 1:
        message += f"; {len(bad) - 1} more bad lines in this sentence"
    report.add(kind, number, message + ": sentence skipped")


# Weibo NER writes each character with its place in its word: "科0<TAB>O".
_WORD_POSITION = re.compile(r"[^\t\s]\d[\t ]")


def _parse_line(text: str) -> tuple[str, str, tuple[str, str] | None]:
    """``(char, tag, None)`` of one line, or ``(.., .., (kind, message))`` saying what is wrong.
    Space around the tag is allowed; the character may itself be a space (``" \tO"``, or
    ``"\u3000 O"`` in a space-separated file)."""
    if _NOT_UTF8.search(text):
        return "", "", (MALFORMED_LINE, "not UTF-8")
    if "\t" in text:
        fields = text.split("\t")
    else:
        spaced = _SPACED.fullmatch(text.rstrip())
        fields = spaced.groups() if spaced else text.split()
    if len(fields) != 2:
        return "", "", (MALFORMED_LINE, f"{len(fields)} fields, expected char and tag")
    char, tag = fields[0], fields[1].strip()
    if _WORD_POSITION.match(text):
        char = char[0]
    if len(char) != 1:
        return "", "", (MALFORMED_LINE, f"token {char!r} is not one character")
    try:
        conlleval.parse_tag(tag)
    except ValueError as error:
        return "", "", (UNKNOWN_TAG, str(error))
    return char, tag, None


def _outside_scheme(tags: list[str], scheme: str, first: int, report: ReadReport) -> bool:
    allowed = conlleval.LETTERS[scheme]
    outside = {tag for tag in set(tags) if tag != "O" and tag[0] not in allowed}
    if not outside:
        return False
    i = next(i for i, tag in enumerate(tags) if tag in outside)
    report.add(UNKNOWN_TAG, first + i, f"{tags[i]} is not a {scheme} tag: sentence skipped")
    return True


def _to_bio(tags: list[str], spans: list, scheme: str, first: int, report) -> list[str]:
    """BIO of one sentence with these conlleval ``spans`` (its characters on lines ``first,
    first + 1, ...``); each entity not tagged as ``scheme`` writes it is reported."""
    if not spans:
        return tags
    canonical = conlleval.encode(spans, len(tags), scheme)
    for type_, start, end in spans:
        if canonical[start:end] != tags[start:end]:
            after = f"after {tags[start - 1]}" if start else "at the sentence start"
            message = (
                f"{type_} entity at characters {start}-{end - 1} tagged "
                f"{' '.join(tags[start:end])} {after}; read the conlleval way"
            )
            report.add(ILL_FORMED_ENTITY, first + start, message, dropped=False)
    return conlleval.encode(spans, len(tags), "bio")


def iter_plain(path: Path, require_label: bool = False):
    """Plain sentences, one a line (inputs to predict), as examples whose tags are all ``O``:
    ``(examples, report)``, the report complete once the examples are. Blank lines are
    skipped, a line with a tab is reported: it is a tagged file's (``char<TAB>tag``) or a
    table's."""
    if require_label:
        raise UserError(f"{path}: format {PLAIN} holds no tags; train from tagged or spans_jsonl")
    report = NerReadReport(os.fspath(path), scheme="none")
    return counted(_plain_examples(path, report), report), report


def _plain_examples(path: Path, report: ReadReport) -> Iterator[NerExample]:
    name = os.path.basename(path)
    for number, text in lines(path, report):
        if "\t" in text:
            message = "a tab in the line: format text is a sentence a line (char<TAB>tag: tagged)"
            report.add(MALFORMED_LINE, number, message)
            continue
        yield NerExample(f"{name}:{number}", text, ("O",) * len(text), number)


def read_spans_jsonl(path: Path) -> tuple[list[NerExample], NerReadReport]:
    """CLUENER-style JSON lines ``{"text", "label": {type: {entity: [[start, end], ...]}}}``
    with ``end`` inclusive; no ``label`` means no entities (a test file). A span outside the
    text or overlapping an earlier one (by start, longer first) is ignored and reported."""
    examples, report = iter_spans_jsonl(path)
    return finish(list(examples), report)


def iter_spans_jsonl(path: Path) -> tuple[Iterator[NerExample], NerReadReport]:
    """:func:`read_spans_jsonl` a line at a time: ``(examples, report)``, the report complete
    once the examples are."""
    report = NerReadReport(os.fspath(path), scheme="spans")
    return counted(_spans_examples(path, report), report), report


def _spans_examples(path: Path, report: ReadReport) -> Iterator[NerExample]:
    for number, text in lines(path, report):  # a line that is not UTF-8 is reported there
        item = _json_record(text, number, report)
        if item is None:
            continue
        spans = _record_spans(item, number, report)
        if spans is None:
            continue
        tags = conlleval.encode(spans, len(item["text"]), "bio")
        guid = str(item["id"]) if "id" in item else f"{os.path.basename(path)}:{number}"
        yield NerExample(guid, item["text"], tuple(tags), number)


def _json_record(text: str, number: int, report: ReadReport) -> dict | None:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as error:
        report.add(MALFORMED_LINE, number, json_error(error))
        return None
    if not isinstance(item, dict):
        report.add(MALFORMED_LINE, number, f"expected a JSON object, got {type(item).__name__}")
        return None
    if not isinstance(item.get("text"), str):
        report.add(MISSING_FIELD, number, "no 'text' string")
        return None
    if not item["text"]:
        report.add(EMPTY_TEXT, number, "text is empty")
        return None
    return item


def _record_spans(item: dict, number: int, report: ReadReport) -> list | None:
    """The record's ``(type, start, end)`` spans, sorted and not overlapping; None (reported)
    when ``label`` is not a mapping of types to mappings of entities to offset pairs."""
    text, label = item["text"], item.get("label") or {}
    if not isinstance(label, dict) or not all(isinstance(m, dict) for m in label.values()):
        report.add(MALFORMED_LINE, number, "'label' is not {type: {entity: [[start, end]]}}")
        return None
    spans = set()
    for type_, mentions in label.items():
        for entity, offsets in mentions.items():
            for pair in offsets if isinstance(offsets, list) else [offsets]:
                span = _offsets(pair, text, str(type_), entity, number, report)
                if span is not None:
                    spans.add(span)
    kept, end = [], 0
    for span in sorted(spans, key=lambda s: (s[1], s[1] - s[2], s[0])):
        if span[1] < end:
            message = f"{span[0]} span {span[1]}-{span[2] - 1} overlaps another: span ignored"
            report.add(OVERLAPPING_SPAN, number, message, dropped=False)
            continue
        kept.append(span)
        end = span[2]
    return kept


def _offsets(pair, text, type_, entity, number, report) -> tuple[str, int, int] | None:
    ok = isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
    if not ok or not 0 <= pair[0] <= pair[1] < len(text):
        message = f"{type_} {entity!r}: offsets {pair!r} not in 0..{len(text) - 1}: span ignored"
        report.add(BAD_SPAN, number, message, dropped=False)
        return None
    start, end = pair[0], pair[1] + 1
    if text[start:end] != entity:
        message = f"{type_} {entity!r} at {start}-{end - 1} is {text[start:end]!r} in the text"
        report.add(SPAN_TEXT_MISMATCH, number, message + " (offsets used)", dropped=False)
    return type_, start, end


def _text_pieces(path: Path, size: int = 1 << 16) -> Iterator[str]:
    """The file's text in pieces of whole lines, with LF line breaks; bytes that are not UTF-8
    become lone surrogates (``surrogateescape``), so that the one line holding them is reported,
    not the file. A piece ends at a newline, which no multi-byte character holds."""
    with open(path, "rb") as f:
        rest, first = b"", True
        while True:
            raw = f.read(size)
            data = rest + raw
            cut = len(data) if not raw else data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
            text = data.decode("utf-8", errors="surrogateescape")
            if first and text:
                text, first = text.removeprefix("\ufeff"), False
            if text:
                yield text.replace("\r\n", "\n") if "\r" in text else text
            if not raw:
                return


_NOT_UTF8 = re.compile("[\udc80-\udcff]")
# A space-separated line: one character (an ideographic space too, which str.split() would
# swallow), ASCII spaces, the tag.
_SPACED = re.compile(r"(.) +(\S+)")


def labels(examples: Sequence[NerExample]) -> tuple[str, ...]:
    """``O``, then ``B-T``, ``I-T`` for each entity type of ``examples`` in sorted order."""
    types = sorted({t for e in examples for t, _, _ in conlleval.entities(e.tags)})
    return ("O", *(f"{letter}-{t}" for t in types for letter in "BI"))
