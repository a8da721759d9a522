"""What every fine-tuning reader shares: the report of bad records, its reason names, and where
a record is in its file.

Why: a reader that crashes on a bad record, or drops it silently, gives numbers nobody can
compare. So every reader (tables, SQuAD, NER) returns ``(examples, report)``: the records it
could parse, and a :class:`ReadReport` naming each problem with file and line, its kind, and
whether the record was left out. For files without lines (parquet, a ``datasets`` folder) the
"line" is the 1-based row number.

Readers fill the report; they never print it. Whoever reads a file for a command prints its
summary once (``zhlm.finetune.task_files.read_file``, ``zhlm-predict``), after the last record: a
streamed file (:func:`counted`) has its report complete only then.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import json.decoder
import json.scanner
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

Path = str | os.PathLike

# Issue kinds, the keys of ReadReport.counts.
MALFORMED_LINE = "malformed_line"  # wrong column count, invalid JSON or invalid UTF-8
MISSING_FIELD = "missing_field"
EMPTY_TEXT = "empty_text"
EMPTY_CONTEXT = "empty_context"
UNKNOWN_LABEL = "unknown_label"  # a label outside the label set given to the reader
LABEL_RESPELLED = "label_respelled"  # 1.0 read as 1: equal numbers are one label (kept)
NO_GOLD_LABEL = "no_gold_label"  # label "-": the annotators did not agree
DUPLICATE_ID = "duplicate_id"
NO_ANSWER = "no_answer"  # an MRC question with no answer text at all
ANSWER_REPAIRED = "answer_repaired"  # answer_start was wrong; the text was found elsewhere
ANSWER_NOT_FOUND = "answer_not_found"  # not in its context: scored, not trained on (kept)
UNKNOWN_TAG = "unknown_tag"  # NER: not a tag of the scheme (sentence skipped)
ILL_FORMED_ENTITY = "ill_formed_entity"  # NER: e.g. I- without B-: read the conlleval way (kept)
WORD_POSITION = "word_position_digit"  # NER: Weibo's 字0: the digit dropped (sentence kept)
BAD_SPAN = "bad_span"  # NER: a span offset outside the text or not two integers (span ignored)
SPAN_TEXT_MISMATCH = "span_text_mismatch"  # NER: the offsets cut out other text (span kept)
OVERLAPPING_SPAN = "overlapping_span"  # NER: overlaps an earlier span (span ignored)
UNKNOWN_ANSWER = "unknown_answer"  # multiple choice: an answer that is none of its options
TOO_MANY_OPTIONS = "too_many_options"  # multiple choice: more options than task.num_choices


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


def lines(path: Path, report: ReadReport) -> Iterator[tuple[int, str]]:
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


class PositionDecoder(json.JSONDecoder):
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


def read_utf8(path: Path, report: ReadReport) -> str | None:
    """The whole file as text (a BOM dropped), or None with the undecodable line reported."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        report.add(MALFORMED_LINE, line, f"not UTF-8: {error.reason}; file not read")
        return None


def guid(path: Path, line: int) -> str:
    return f"{os.path.basename(path)}:{line}"


def json_error(error: json.JSONDecodeError) -> str:
    """``invalid JSON: <what> at column <n>`` of one line (json's messages that end in "at",
    such as "Unterminated string starting at", take the column without a second "at")."""
    return f"invalid JSON: {error.msg.removesuffix(' at')} at column {error.colno}"


def finish(examples: list, report: ReadReport) -> tuple[list, ReadReport]:
    report.records = len(examples)
    return examples, report


def counted(examples: Iterable, report: ReadReport) -> Iterator:
    """``examples`` as they come, counted into ``report.records``; once they are all read, the
    report's issues are put in file order (a source may report ahead of the rows it yields)."""
    report.records = 0
    for example in examples:
        report.records += 1
        yield example
    report.issues.sort(key=lambda issue: issue.line or 0)
