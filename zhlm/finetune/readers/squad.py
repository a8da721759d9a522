"""SQuAD v1 JSON (CMRC 2018, DRCD): questions with their passage and answer spans, offsets
checked.

Why the checks: CMRC 2018 dev has 193 answers whose text is not in the passage (``answer_start``
-1) and 7 whose offset is off by one or two. An answer found elsewhere in the passage is repaired
to the nearest occurrence, one not found is kept without a span (the official metric still scores
against it), and each is reported with the line of its text (see
:mod:`zhlm.finetune.readers.report`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator

from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.report import (
    ANSWER_NOT_FOUND,
    ANSWER_REPAIRED,
    DUPLICATE_ID,
    EMPTY_CONTEXT,
    MALFORMED_LINE,
    MISSING_FIELD,
    NO_ANSWER,
    Path,
    PositionDecoder,
    ReadReport,
    finish,
    read_utf8,
)


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
    answers: tuple[MrcAnswer, ...] = ()
    title: str = ""
    context_id: str = ""
    line: int = 0

    @property
    def guid(self) -> str:
        """The question id, under the name every reader's examples give their id."""
        return self.qid

    @property
    def located_answers(self) -> tuple[MrcAnswer, ...]:
        """The answers usable as training spans (the others only count for the metric)."""
        return tuple(a for a in self.answers if a.start is not None)


def read_squad(path: Path, require_answers: bool = True) -> tuple[list[MrcExample], ReadReport]:
    """SQuAD v1 JSON (CMRC 2018, DRCD). Each answer's text must occur at ``answer_start``; if it
    does not, the occurrence nearest to it is used (``answer_repaired``), and an answer that does
    not occur at all is kept with ``start=None`` (``answer_not_found``): the official metric still
    scores against it. ``require_answers=False`` keeps questions with no answers (test sets)."""
    report = ReadReport(os.fspath(path))
    raw = read_utf8(path, report)
    if raw is None:
        return finish([], report)
    decoder = PositionDecoder(raw)
    try:
        dataset = decoder.decode(raw)
    except json.JSONDecodeError as error:
        report.add(MALFORMED_LINE, error.lineno, f"invalid JSON: {error.msg}")
        return finish([], report)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        report.add(MISSING_FIELD, 1, "no top-level 'data' list: not SQuAD format")
        return finish([], report)
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
    return finish(examples, report)


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
    message = (
        f"{_short(text)} does not occur in its context (answer_start {start}): no span to train "
        "on, still scored"
    )
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


class SquadReader(Reader):
    """SQuAD v1 JSON, read whole (one JSON document)."""

    formats = ("squad",)
    example_type = MrcExample

    def read(self, path, task, require_label=True):
        examples, report = read_squad(path, require_answers=require_label)
        return iter(examples), report

    def describe(self, path, task):
        return "format squad (SQuAD v1 JSON: data, paragraphs, qas): convert the file to it"
