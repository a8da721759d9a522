"""Multiple-choice questions (a passage or none, a question, its options, the answer) as
:class:`ChoiceExample`: the ``jsonl`` format here, C3's JSON in :mod:`zhlm.finetune.readers.c3`.

``jsonl``: a record a line with ``question``, ``options`` (a list), optionally ``passage`` and
``id``, and ``answer`` (the option's text or its 0-based index). Several files (C3's dialogue
and mixed-genre halves) are read as one through ``task.train_file=a.json,b.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os

from zhlm.errors import UserError
from zhlm.finetune.readers import report as report_lib
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.c3 import c3_questions


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    guid: str
    passage: str  # "" when the question stands alone
    question: str
    options: tuple[str, ...]
    label: int | None = None  # the answer's option index; None: unlabelled (inputs to predict)
    line: int | None = None
    passage_id: str = ""  # questions on one passage share it (a holdout keeps them together)


class ChoiceReader(Reader):
    """C3's JSON or JSON lines of questions; a question with more options than
    ``task.num_choices`` (when set) is reported and left out."""

    formats = ("c3", "jsonl")
    example_type = ChoiceExample

    def read(self, path, task, require_label=True):
        report = report_lib.ReadReport(os.fspath(path))
        records = c3_questions(path, report) if task.format == "c3" else _lines(path, report)
        examples = []
        for record in records:
            example = _example(report, require_label, task.num_choices, **record)
            if example is not None:
                examples.append(example)
        return iter(report_lib.finish(examples, report)[0]), report

    def describe(self, path, task):
        return (
            "format c3 (C3's JSON: [[passage sentences], [{question, choice, answer}], id]) or "
            'jsonl (a record a line with "question", "options" and "answer"): pass the one '
            "that fits, --config.task.format"
        )

    def examples_from(self, records, task):
        """As the base's, with ``options`` a non-empty list of strings (kept as a tuple) and
        ``passage`` optional (a question may stand alone)."""
        passages = [r.get("passage") or "" if isinstance(r, dict) else "" for r in records]
        for index, passage in enumerate(passages):
            if not isinstance(passage, str):
                raise UserError(f"input {index}: passage is {passage!r}; give a string")
        # The base checks the required fields; an absent passage must not fail it.
        stand_in = [dict(r, passage="-") if isinstance(r, dict) else r for r in records]
        examples = super().examples_from(stand_in, task)
        for index, e in enumerate(examples):
            options = e.options
            if (
                not isinstance(options, list | tuple)
                or not options
                or not all(isinstance(o, str) for o in options)
            ):
                raise UserError(f"input {index}: options is {options!r}; give a list of strings")
        return [
            dataclasses.replace(e, passage=p, options=tuple(e.options))
            for e, p in zip(examples, passages, strict=True)
        ]


def _example(report, require_label, num_choices, line, guid, passage, question, options, answer,
             passage_id):  # fmt: skip
    """A :class:`ChoiceExample` from one record's fields, or None with the issue reported."""
    if not isinstance(question, str) or not isinstance(options, list) or not options:
        report.add(report_lib.MISSING_FIELD, line, "a question and a non-empty option list")
        return None
    if not all(isinstance(o, str) for o in options) or not isinstance(passage, str):
        report.add(report_lib.MALFORMED_LINE, line, "passage and options must be strings")
        return None
    label = None
    if answer is not None:
        if isinstance(answer, int) and not isinstance(answer, bool):
            label = answer if 0 <= answer < len(options) else None
        elif answer in options:
            label = options.index(answer)
        if label is None:
            report.add(report_lib.UNKNOWN_ANSWER, line, f"answer {answer!r} is none of {options}")
            return None
    elif require_label:
        report.add(report_lib.MISSING_FIELD, line, "no answer")
        return None
    if num_choices and len(options) > num_choices:  # the head scores a fixed number of options
        message = f"{len(options)} options; config.task.num_choices={num_choices}"
        report.add(report_lib.TOO_MANY_OPTIONS, line, message)
        return None
    return ChoiceExample(guid, passage, question, tuple(options), label, line, passage_id)


def _lines(path, report):
    """The ``jsonl`` format's records: ``question``, ``options``, optionally ``passage`` and
    ``id``, and ``answer`` (option text or 0-based index; optional for inputs to predict)."""
    for line, text in report_lib.lines(path, report):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            report.add(report_lib.MALFORMED_LINE, line, report_lib.json_error(error))
            continue
        if not isinstance(record, dict):
            report.add(report_lib.MALFORMED_LINE, line, "not a JSON object")
            continue
        guid = str(record.get("id", report_lib.guid(path, line)))
        passage = record.get("passage", "")
        yield dict(
            line=line, guid=guid, passage=passage, question=record.get("question"),
            options=record.get("options"), answer=record.get("answer"),
            passage_id=passage or guid,
        )  # fmt: skip
