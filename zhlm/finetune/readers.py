"""Readers for the fine-tuning data files: parse them into dataclasses, report what is wrong.

Why a module of its own: the task code (tokenisation, sliding windows, batching) should see clean
records, and the public task files are not clean. CMRC 2018 dev has 193 answers whose text is
not in the passage (``answer_start`` -1) and 7 whose offset is off by one or two; OCNLI has items
without a gold label (``-``); one stray tab or unknown label in a TSV shifts a dataset. A reader
that crashes on those, or drops them silently, gives numbers nobody can compare. So every reader
returns ``(examples, report)``: the records it could parse, and a :class:`ReadReport` naming each
problem with file and line, its kind, and whether the record was left out. Nothing else is
dropped (blank lines are not records). No tokenisation happens here.

Formats:
* :func:`read_sentence_tsv`: ``label<TAB>text``; with a header row (ChnSentiCorp
  ``label<TAB>text_a``) columns are found by name, without one (THUCNews-style) by position.
* :func:`read_pair_tsv`: ``text_a<TAB>text_b<TAB>label`` (LCQMC, BQ: no header); a header row,
  if present (XNLI-style ``premise hypo label``), names the columns.
* :func:`read_pair_jsonl`: one JSON object per line with ``sentence1, sentence2, label``
  (OCNLI, CLUE); ``label`` ``-`` means the annotators did not agree: no gold label.
* :func:`read_squad`: SQuAD v1 JSON (CMRC 2018, DRCD), answer offsets checked and repaired.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import json.decoder
import json.scanner
import logging
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

Path = str | os.PathLike

# Issue kinds, the keys of ReadReport.counts.
MALFORMED_LINE = "malformed_line"  # wrong column count, invalid JSON or invalid UTF-8
MISSING_FIELD = "missing_field"
EMPTY_TEXT = "empty_text"
EMPTY_CONTEXT = "empty_context"
UNKNOWN_LABEL = "unknown_label"  # a label outside the label set given to the reader
NO_GOLD_LABEL = "no_gold_label"  # label "-": the annotators did not agree
DUPLICATE_ID = "duplicate_id"
NO_ANSWER = "no_answer"  # an MRC question with no answer text at all
ANSWER_REPAIRED = "answer_repaired"  # answer_start was wrong; the text was found elsewhere
ANSWER_NOT_FOUND = "answer_not_found"  # the answer text does not occur in its context

_NO_GOLD = "-"
# Header names accepted for each column, so that CLUE, ERNIE and XNLI exports all read.
_TEXT_A_NAMES = ("text_a", "text", "sentence", "sentence1", "s1", "premise", "question1", "query1")
_TEXT_B_NAMES = ("text_b", "sentence2", "s2", "hypo", "hypothesis", "question2", "query2")
_LABEL_NAMES = ("label", "gold_label")

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ReadIssue:
    """One problem in an input file; ``dropped`` says whether its record was left out."""

    path: str
    line: int | None
    kind: str
    message: str
    dropped: bool

    def __str__(self) -> str:
        action = "record skipped" if self.dropped else "kept"
        return f"{self.path}:{self.line}: {self.kind}: {self.message} ({action})"


@dataclasses.dataclass
class ReadReport:
    """What a reader found in one file: records returned and every issue, in file order."""

    path: str
    records: int = 0
    issues: list[ReadIssue] = dataclasses.field(default_factory=list)

    def add(self, kind: str, line: int | None, message: str, dropped: bool = True) -> None:
        self.issues.append(ReadIssue(self.path, line, kind, message, dropped))

    @property
    def counts(self) -> collections.Counter[str]:
        return collections.Counter(issue.kind for issue in self.issues)

    @property
    def dropped(self) -> int:
        return sum(issue.dropped for issue in self.issues)

    @property
    def ok(self) -> bool:
        return not self.issues

    def summary(self, max_issues: int = 5) -> str:
        """One line of counts, then the first ``max_issues`` issues, one per line."""
        counts = ", ".join(f"{kind}={n}" for kind, n in sorted(self.counts.items()))
        lines = [f"{self.path}: {self.records} records, {self.dropped} skipped [{counts}]"]
        lines += [f"  {issue}" for issue in self.issues[:max_issues]]
        if len(self.issues) > max_issues:
            lines.append(f"  ... {len(self.issues) - max_issues} more")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class SentenceExample:
    guid: str
    text: str
    label: str | None
    line: int


@dataclasses.dataclass(frozen=True)
class PairExample:
    guid: str
    text_a: str
    text_b: str
    label: str | None
    line: int


@dataclasses.dataclass(frozen=True)
class MrcAnswer:
    """An answer span; ``start`` is a character offset into the context, None if not found."""

    text: str
    start: int | None


@dataclasses.dataclass(frozen=True)
class MrcExample:
    qid: str
    question: str
    context: str
    answers: tuple[MrcAnswer, ...]
    title: str
    context_id: str
    line: int

    @property
    def located_answers(self) -> tuple[MrcAnswer, ...]:
        """The answers usable as training spans (the others only count for the metric)."""
        return tuple(a for a in self.answers if a.start is not None)


def read_sentence_tsv(
    path: Path,
    labels: Sequence[str] | None = None,
    has_header: bool | None = None,
    require_label: bool = True,
) -> tuple[list[SentenceExample], ReadReport]:
    """Single-sentence classification TSV. ``has_header=None`` detects a first row naming
    ``label``; ``labels=None`` accepts any label."""
    report = ReadReport(os.fspath(path))
    examples = []
    rows = _tsv_rows(path, report, has_header, (_LABEL_NAMES, _TEXT_A_NAMES), ("label", "text"))
    for line, row in rows:
        label = _check_label(row.get("label"), labels, require_label, report, line)
        if label is _SKIP or not _nonempty(row, ("text",), report, line):
            continue
        examples.append(SentenceExample(_guid(path, line), row["text"], label, line))
    return _finish(examples, report)


def read_pair_tsv(
    path: Path,
    labels: Sequence[str] | None = None,
    has_header: bool | None = None,
    require_label: bool = True,
) -> tuple[list[PairExample], ReadReport]:
    """Sentence-pair TSV, ``text_a, text_b, label`` by position unless a header names them."""
    report = ReadReport(os.fspath(path))
    examples = []
    names = (_TEXT_A_NAMES, _TEXT_B_NAMES, _LABEL_NAMES)
    rows = _tsv_rows(path, report, has_header, names, ("text_a", "text_b", "label"))
    for line, row in rows:
        label = _check_label(row.get("label"), labels, require_label, report, line)
        if label is _SKIP or not _nonempty(row, ("text_a", "text_b"), report, line):
            continue
        examples.append(PairExample(_guid(path, line), row["text_a"], row["text_b"], label, line))
    return _finish(examples, report)


def read_pair_jsonl(
    path: Path,
    labels: Sequence[str] | None = None,
    keys: tuple[str, str, str] = ("sentence1", "sentence2", "label"),
    require_label: bool = True,
) -> tuple[list[PairExample], ReadReport]:
    """Sentence-pair JSON lines (OCNLI, CLUE); ``keys`` names the two texts and the label."""
    report = ReadReport(os.fspath(path))
    examples = []
    for line, text in _lines(path, report):
        try:
            item = json.loads(text)
        except json.JSONDecodeError as error:
            report.add(MALFORMED_LINE, line, f"invalid JSON: {error.msg} at column {error.colno}")
            continue
        if not isinstance(item, dict):
            report.add(MALFORMED_LINE, line, f"expected a JSON object, got {type(item).__name__}")
            continue
        text_a, text_b, label_key = keys
        label = _check_label(item.get(label_key), labels, require_label, report, line, label_key)
        if label is _SKIP or not _nonempty(item, (text_a, text_b), report, line):
            continue
        guid = str(item["id"]) if "id" in item else _guid(path, line)
        examples.append(PairExample(guid, item[text_a], item[text_b], label, line))
    return _finish(examples, report)


def read_squad(path: Path, require_answers: bool = True) -> tuple[list[MrcExample], ReadReport]:
    """SQuAD v1 JSON (CMRC 2018, DRCD). Each answer's text must occur at ``answer_start``; if it
    does not, the occurrence nearest to it is used (``answer_repaired``), and an answer that does
    not occur at all is kept with ``start=None`` (``answer_not_found``): the official metric still
    scores against it. ``require_answers=False`` keeps questions with no answers (test sets)."""
    report = ReadReport(os.fspath(path))
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        report.add(MALFORMED_LINE, line, f"not UTF-8: {error.reason}; file not read")
        return _finish([], report)
    decoder = _PositionDecoder(raw)
    try:
        dataset = decoder.decode(raw)
    except json.JSONDecodeError as error:
        report.add(MALFORMED_LINE, error.lineno, f"invalid JSON: {error.msg}")
        return _finish([], report)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        report.add(MISSING_FIELD, 1, "no top-level 'data' list: not SQuAD format")
        return _finish([], report)
    examples: list[MrcExample] = []
    seen: set[str] = set()
    for article in _dicts(dataset["data"], "article", decoder, report):
        title = str(article.get("title", ""))
        for para in _dicts(article.get("paragraphs"), "paragraph", decoder, report, article):
            for qa in _dicts(para.get("qas"), "question", decoder, report, para):
                example = _squad_question(qa, para, title, decoder, report, require_answers)
                if example is None:
                    continue
                if example.qid in seen:
                    report.add(DUPLICATE_ID, example.line, f"question id {example.qid!r} again")
                    continue
                seen.add(example.qid)
                examples.append(example)
    return _finish(examples, report)


def _squad_question(qa, para, title, decoder, report, require_answers) -> MrcExample | None:
    line = decoder.line(qa)
    qid, question = qa.get("id"), qa.get("question")
    if qid in (None, "") or not isinstance(question, str):
        report.add(MISSING_FIELD, line, "question without 'id' or 'question'")
        return None
    context = para.get("context")
    if not isinstance(context, str) or not context.strip():
        kind = MISSING_FIELD if context is None else EMPTY_CONTEXT
        report.add(kind, line, f"question {qid!r}: paragraph has no context text")
        return None
    answers = []
    for answer in _dicts(qa.get("answers", []), "answer", decoder, report, qa, dropped=False):
        located = _locate(answer, context, decoder.line(answer), report)
        if located is not None:
            answers.append(located)
    if require_answers and not answers:
        report.add(NO_ANSWER, line, f"question {qid!r} has no answer text")
        return None
    context_id = str(para.get("id", ""))
    return MrcExample(str(qid), question, context, tuple(answers), title, context_id, line)


def _locate(answer: dict, context: str, line: int, report: ReadReport) -> MrcAnswer | None:
    text = answer.get("text")
    if not isinstance(text, str) or not text.strip():
        report.add(MISSING_FIELD, line, "answer without text: answer ignored", dropped=False)
        return None
    start = answer.get("answer_start")
    try:
        start = int(start)
    except (TypeError, ValueError):
        start = None
    if start is not None and start >= 0 and context.startswith(text, start):
        return MrcAnswer(text, start)
    # Look for the text itself first, then for it without surrounding whitespace.
    for candidate in dict.fromkeys((text, text.strip())):
        found = _occurrences(context, candidate)
        if found:
            # Of several occurrences the one nearest the given offset is the annotated one.
            best = min(found, key=lambda i: abs(i - (start if start is not None else 0)))
            message = f"{_short(text)}: answer_start {start} -> {best} ({len(found)} found)"
            report.add(ANSWER_REPAIRED, line, message, dropped=False)
            return MrcAnswer(candidate, best)
    message = f"{_short(text)} does not occur in its context (answer_start {start})"
    report.add(ANSWER_NOT_FOUND, line, message, dropped=False)
    return MrcAnswer(text, None)


def _short(text: str, limit: int = 30) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _occurrences(context: str, text: str) -> list[int]:
    found, i = [], context.find(text)
    while i >= 0:
        found.append(i)
        i = context.find(text, i + 1)
    return found


class _PositionDecoder(json.JSONDecoder):
    """A JSONDecoder that remembers where each object starts, so issues can name a line.

    The C scanner gives no positions, so objects go through the pure-Python scanner with a
    wrapped object parser; strings are still decoded by the C routine (about 1 s for 3 MB).
    These json internals are undocumented: without them lines are None, the parse unchanged.
    """

    def __init__(self, text: str):
        super().__init__()
        self._starts: dict[int, int] = {}
        self._newlines = [match.start() for match in re.finditer("\n", text)]
        if not hasattr(json.decoder, "JSONObject") or not hasattr(json.scanner, "py_make_scanner"):
            return

        def parse_object(s_and_end, *args, **kwargs):
            obj, end = json.decoder.JSONObject(s_and_end, *args, **kwargs)
            # Where its first key starts: that line shows the user which object is meant.
            text, after_brace = s_and_end
            self._starts[id(obj)] = json.decoder.WHITESPACE.match(text, after_brace).end()
            return obj, end

        self.parse_object = parse_object
        self.scan_once = json.scanner.py_make_scanner(self)

    def line(self, obj: Any) -> int | None:
        """1-based line of an object from the last decode (alive, so its id is unique)."""
        start = self._starts.get(id(obj))
        return None if start is None else bisect.bisect_left(self._newlines, start) + 1


def _dicts(items, what, decoder, report, parent=None, dropped=True) -> Iterator[dict]:
    """The dict items of a JSON list, reporting a missing list or a non-object item."""
    line = decoder.line(parent) if parent is not None else 1
    if not isinstance(items, list):
        report.add(MISSING_FIELD, line, f"no list of {what}s here", dropped)
        return
    for item in items:
        if isinstance(item, dict):
            yield item
        else:
            report.add(MALFORMED_LINE, line, f"{what} is not a JSON object: {item!r:.40}", dropped)


def _lines(path: Path, report: ReadReport) -> Iterator[tuple[int, str]]:
    """(line number, text) of each non-blank line; undecodable lines are reported, not raised."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                report.add(
                    MALFORMED_LINE, number, f"not UTF-8: {error.reason} at byte {error.start}"
                )
                continue
            text = text.removeprefix("\ufeff") if number == 1 else text
            text = text.rstrip("\r\n")
            if text.strip():
                yield number, text


def _tsv_rows(path, report, has_header, aliases, names) -> Iterator[tuple[int, dict[str, str]]]:
    """Rows as {name: field}, the column order from a header row or else from ``names``."""
    columns: list[str | None] = list(names)
    first = True
    for number, text in _lines(path, report):
        fields = text.split("\t")
        if first:
            first = False
            if has_header or (has_header is None and _looks_like_header(fields)):
                columns = [_column_name(field, aliases, names) for field in fields]
                continue
        # A text in the last column may itself hold tabs (THUCNews bodies): they belong to it.
        if len(fields) > len(columns) and columns[-1] == "text":
            fields = fields[: len(columns) - 1] + ["\t".join(fields[len(columns) - 1 :])]
        if len(fields) != len(columns):
            message = f"{len(fields)} tab-separated fields, expected {len(columns)}"
            report.add(MALFORMED_LINE, number, message)
            continue
        yield number, {name: value for name, value in zip(columns, fields, strict=True) if name}


def _looks_like_header(fields: list[str]) -> bool:
    return any(field.strip().lower() in _LABEL_NAMES for field in fields)


def _column_name(field: str, aliases, names) -> str | None:
    """Our name for a header field, or None for a column we do not read (e.g. ``qid``)."""
    field = field.strip().lower()
    return next((name for name, alias in zip(names, aliases, strict=True) if field in alias), None)


# Returned by _check_label for a record that must be skipped (None means "no label, keep").
_SKIP = object()


def _check_label(value, labels, require_label, report, line, key="label"):
    if value is None or (isinstance(value, str) and not value.strip()):
        if require_label:
            report.add(MISSING_FIELD, line, f"no {key}")
            return _SKIP
        return None
    label = str(value).strip()
    if label == _NO_GOLD:
        if require_label:
            report.add(NO_GOLD_LABEL, line, f"{key} '-': annotators did not agree")
            return _SKIP
        return None
    if labels is not None and label not in labels:
        report.add(UNKNOWN_LABEL, line, f"{key} {label!r} not in {list(labels)}")
        return _SKIP
    return label


def _nonempty(row: dict, names: Sequence[str], report: ReadReport, line: int) -> bool:
    """Whether each named text is present, a string and not blank; reports the first that is not."""
    for name in names:
        value = row.get(name)
        if value is None:
            report.add(MISSING_FIELD, line, f"no {name}")
            return False
        if not isinstance(value, str):
            report.add(MALFORMED_LINE, line, f"{name} is a {type(value).__name__}, not text")
            return False
        if not value.strip():
            report.add(EMPTY_TEXT, line, f"{name} is empty")
            return False
    return True


def _guid(path: Path, line: int) -> str:
    return f"{os.path.basename(path)}:{line}"


def _finish(examples: list, report: ReadReport) -> tuple[list, ReadReport]:
    report.records = len(examples)
    if report.issues:
        log.warning("%s", report.summary())
    return examples, report
