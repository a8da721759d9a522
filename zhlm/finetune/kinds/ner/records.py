"""What NER predicts, as records and as a file: the entities of each example's tags (conlleval
chunks) with their text, and the predictions file that reads back as CLUENER-style spans."""

from __future__ import annotations

import json
from collections.abc import Sequence

from zhlm import paths
from zhlm.finetune.metrics import conlleval
from zhlm.finetune.readers.ner import NerExample


def prediction_records(example: NerExample, tags: Sequence[str]) -> list[dict]:
    """``[{"type", "start", "end", "text"}]`` of the entities in ``tags`` (conlleval chunks),
    ``end`` exclusive so that ``text == example.text[start:end]``."""
    if len(tags) != len(example.text):
        raise ValueError(f"{example.guid}: {len(tags)} tags for {len(example.text)} characters")
    return [
        dict(type=type_, start=start, end=end, text=example.text[start:end])
        for type_, start, end in conlleval.entities(tags)
    ]


def cluener_label(records: Sequence[dict]) -> dict:
    """``prediction_records`` as CLUENER writes them: ``{type: {text: [[start, end]]}}`` with
    ``end`` inclusive (what :func:`zhlm.finetune.readers.ner.read_spans_jsonl` reads)."""
    label: dict = {}
    for r in records:
        label.setdefault(r["type"], {}).setdefault(r["text"], []).append([r["start"], r["end"] - 1])
    return label


def write_predictions(path: str, examples: Sequence[NerExample], tag_seqs) -> None:
    """One JSON line per example: ``{"id", "text", "entities": prediction_records(...),
    "label": cluener_label(...)}``, so the file also reads back
    with :func:`zhlm.finetune.readers.ner.read_spans_jsonl`."""
    records_out = []
    for example, tags in zip(examples, tag_seqs, strict=True):
        records = prediction_records(example, tags)
        record = dict(id=example.guid, text=example.text, entities=records)
        record["label"] = cluener_label(records)
        records_out.append(json.dumps(record, ensure_ascii=False) + "\n")
    paths.resolve(path).write_text("".join(records_out), encoding="utf-8")  # local or gs://
