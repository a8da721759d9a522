"""C3's own JSON: ``[[passage sentences], [{question, choice, answer}], id]``, the answer given
as the option's text. This module parses the file into one record per question;
:mod:`zhlm.finetune.readers.choices` checks them and makes the examples."""

from __future__ import annotations

import json

from zhlm.finetune.readers import report as report_lib


def c3_questions(path, report) -> list[dict]:
    """The questions of a C3 file, a dict each (``line``, ``guid``, ``passage``, ``question``,
    ``options``, ``answer``, ``passage_id``), unchecked; what cannot be parsed is reported.
    The questions of a passage get ids ``<id>-<n>`` (1-based) and share its passage (its
    sentences joined by newlines, as C3's baseline joins them)."""
    raw = report_lib.read_utf8(path, report)
    if raw is None:
        return []
    decoder = report_lib.PositionDecoder(raw)
    try:
        data = decoder.decode(raw)
    except json.JSONDecodeError as error:
        report.add(report_lib.MALFORMED_LINE, error.lineno, report_lib.json_error(error))
        return []
    if not isinstance(data, list):
        report.add(report_lib.MISSING_FIELD, 1, "not a list of [passage, questions, id]")
        return []
    questions = []
    for number, item in enumerate(data, 1):
        ok = isinstance(item, list) and len(item) == 3 and isinstance(item[1], list)
        if not ok or not isinstance(item[0], list):
            report.add(
                report_lib.MALFORMED_LINE, None, f"item {number}: not [sentences, questions, id]"
            )
            continue
        passage_id = str(item[2])
        for n, qa in enumerate(item[1], 1):
            if not isinstance(qa, dict):
                report.add(
                    report_lib.MALFORMED_LINE, None, f"item {number}: a question is not an object"
                )
                continue
            questions.append(
                dict(
                    line=decoder.line(qa), guid=f"{passage_id}-{n}",
                    passage="\n".join(map(str, item[0])), question=qa.get("question"),
                    options=qa.get("choice"), answer=qa.get("answer"), passage_id=passage_id,
                )
            )  # fmt: skip
    return questions
