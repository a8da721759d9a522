"""Each file format of :mod:`zhlm.finetune.readers.tables` as rows:
``SOURCES[fmt](path, report, names)``.

Why apart from the layout: a format only turns bytes into records (the kept parsers: ``csv``,
``json``, ``pyarrow``, ``datasets``) and reports what it cannot read; which fields hold the
texts and the label is decided once, for every format, in :mod:`zhlm.finetune.readers.tables`. The
header names live here because a TSV/CSV source must tell a header row from a record.

Rows are read as they are asked for, so a file of any size is read in bounded memory: TSV/CSV
and JSON lines a record at a time (JSON lines look ahead 100 rows for their column names),
parquet a batch of rows at a time, a ``datasets`` folder through its memory map. Only ``json``,
one JSON document, is parsed whole.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence

from zhlm.errors import NotFound, UserError
from zhlm.finetune.readers.report import (
    MALFORMED_LINE,
    PositionDecoder,
    json_error,
    lines,
    read_utf8,
)

PLAIN = "text"  # plain text, one input a line: a pair's two texts split by a tab
DELIMITERS = {"tsv": "\t", "csv": ",", PLAIN: "\t"}
# Header names accepted for each field, so that CLUE, ERNIE, XNLI and HF exports all read.
TEXT_NAMES = ("text_a", "text", "sentence", "sentence1", "s1", "premise", "question1", "query1")
TEXT_NAMES += ("review", "content", "title", "query", "question")
TEXT_B_NAMES = ("text_b", "sentence2", "s2", "hypo", "hypothesis", "question2", "query2")
LABEL_NAMES = ("label", "gold_label", "labels", "class", "sentiment")
KNOWN_NAMES = frozenset(TEXT_NAMES + TEXT_B_NAMES + LABEL_NAMES)
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a bad byte


def first_column(columns: Sequence[str], names: Sequence[str]) -> str | None:
    """The first of ``names`` (case-insensitive) among ``columns``, as the column spells it."""
    lowered = {str(c).strip().lower(): c for c in reversed(columns)}
    return next((lowered[n.lower()] for n in names if n.lower() in lowered), None)


def default_texts(columns, label, n_texts) -> tuple[str, ...]:
    """The usual text names; failing those, the columns other than the label and ``id``."""
    found = (first_column(columns, TEXT_NAMES), first_column(columns, TEXT_B_NAMES))[:n_texts]
    if all(found) and len(set(found)) == n_texts:
        return tuple(found)
    others = [c for c in columns if c != label and str(c).lower() not in ("id", "idx", "qid")]
    return tuple(others) if len(others) == n_texts else ()


# Each returns (column names, or None for a headerless TSV/CSV, and an iterator of
# (line, row)): rows are dicts, or lists of fields when there is no header.


def _delimited(fmt: str):
    def source(path, report, names):
        rows = _csv_rows(path, report, DELIMITERS[fmt], fmt == "tsv")
        first = next(rows, None)
        if first is None:
            return None, iter(())
        line, fields = first
        if is_header(fields, names):
            return [f.strip() for f in fields], rows
        return None, _chain([first], rows)

    return source


def _text(path, report, names):
    """Plain text, a record a line: never a header (the first line is a text like the rest)."""
    return None, _csv_rows(path, report, DELIMITERS[PLAIN], True)


def _csv_rows(path, report, delimiter, tsv) -> Iterator[tuple[int, list[str]]]:
    """(first line, fields) of each record that is not blank; csv does the quoting."""
    quoting = {"quoting": csv.QUOTE_NONE} if tsv else {}
    # A THUCNews body is past csv's default 128k-character field limit.
    csv.field_size_limit(max(csv.field_size_limit(), 1 << 26))
    # surrogateescape: a bad byte spoils its record only, reported below, not the whole file.
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, **quoting)
        last = 0
        try:
            for fields in reader:
                line, last = last + 1, reader.line_num
                if not any(field.strip() for field in fields):
                    continue
                if any(_UNDECODABLE.search(field) for field in fields):
                    report.add(MALFORMED_LINE, line, "not UTF-8: an undecodable byte")
                    continue
                yield line, fields
        except csv.Error as error:
            report.add(MALFORMED_LINE, reader.line_num, f"{error}; the rest is not read")


def is_header(fields: Sequence[str], names: Iterable[str] = ()) -> bool:
    """Whether a first row names columns: a usual name, or one of ``names``, among its fields."""
    wanted = KNOWN_NAMES | {n.lower() for n in names}
    return any(field.strip().lower() in wanted for field in fields)


def fields_row(fields, header, layout, fmt, report, line) -> dict | None:
    """A TSV/CSV record as {column: field}, keyed by header name or else by position. It must
    have every column; a text in the last column takes any fields after it (THUCNews bodies hold
    tabs, and so may a review), a record one field short or long is reported. A plain text
    line has exactly its texts: a tab more or less says that the file is a table."""
    keys = header or list(range(max(k for k in (*layout.texts, layout.label) if k is not None) + 1))
    if len(fields) > len(keys) and keys[-1] in layout.texts and fmt != PLAIN:
        fields = fields[: len(keys) - 1] + [DELIMITERS[fmt].join(fields[len(keys) - 1 :])]
    if len(fields) != len(keys):
        report.add(MALFORMED_LINE, line, _count_message(fields, len(keys), fmt))
        return None
    return dict(zip(keys, fields, strict=True))


def _count_message(fields, expected, fmt) -> str:
    if fmt == PLAIN:
        return (
            f"{len(fields) - 1} tab(s) in the line; format text is one text a line (a pair: "
            "two texts split by one tab), a table is format tsv"
        )
    kind = "comma" if fmt == "csv" else "tab"
    return f"{len(fields)} {kind}-separated fields, expected {expected}"


def _chain(first, rest):
    yield from first
    yield from rest


def _jsonl(path, report, names):
    rows = _jsonl_rows(path, report)
    ahead = list(itertools.islice(rows, _KEY_ROWS))
    return _keys(ahead), _chain(ahead, rows)


def _jsonl_rows(path, report) -> Iterator[tuple[int, dict]]:
    for line, text in lines(path, report):
        try:
            item = json.loads(text)
        except json.JSONDecodeError as error:
            report.add(MALFORMED_LINE, line, json_error(error))
            continue
        if not isinstance(item, dict):
            report.add(MALFORMED_LINE, line, f"expected a JSON object, got {type(item).__name__}")
            continue
        yield line, item


def _json(path, report, names):
    text = read_utf8(path, report)
    if text is None:
        return None, iter(())
    decoder = PositionDecoder(text)
    try:
        items = decoder.decode(text)
    except json.JSONDecodeError as error:
        hint = "; one object per line is format jsonl" if error.msg == "Extra data" else ""
        report.add(MALFORMED_LINE, error.lineno, f"invalid JSON: {error.msg}{hint}")
        return None, iter(())
    if not isinstance(items, list):
        report.add(
            MALFORMED_LINE, 1, f"expected a JSON list of objects, got {type(items).__name__}"
        )
        return None, iter(())
    rows = []
    for item in items:
        line = decoder.line(item) or 1
        if isinstance(item, dict):
            rows.append((line, item))
        else:
            report.add(MALFORMED_LINE, line, f"expected a JSON object, got {type(item).__name__}")
    return _keys(rows), iter(rows)


_KEY_ROWS = 100  # the JSON rows whose keys name the columns


def _keys(rows) -> list[str]:
    """Column names of JSON rows: the keys in the order they first appear."""
    return list(dict.fromkeys(key for _, row in rows[:_KEY_ROWS] for key in row))


def _parquet(path, report, names):
    import pyarrow
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (pyarrow.ArrowInvalid, OSError) as error:
        report.add(MALFORMED_LINE, None, f"not a parquet file: {error}")
        return None, iter(())
    return parquet.schema_arrow.names, _parquet_rows(parquet, report)


def _parquet_rows(parquet, report) -> Iterator[tuple[int, dict]]:
    """(row number, row) of each row, read a batch at a time."""
    import pyarrow

    row = 0
    try:
        for batch in parquet.iter_batches(batch_size=1024):
            for item in batch.to_pylist():
                row += 1
                yield row, item
    except (pyarrow.ArrowInvalid, OSError) as error:
        report.add(
            MALFORMED_LINE, row + 1, f"unreadable parquet data: {error}; the rest is not read"
        )


def _datasets(path, report, names):
    try:
        import datasets
    except ImportError as error:
        raise UserError("format datasets needs `pip install 'zhlm[datasets]'`") from error
    try:
        loaded = datasets.load_from_disk(os.fspath(path))
    except FileNotFoundError as error:  # a folder that save_to_disk did not write
        raise NotFound(f"{error} (format datasets reads a Dataset.save_to_disk folder)") from error
    if isinstance(loaded, datasets.DatasetDict):
        splits = ", ".join(loaded)
        raise UserError(f"{path} holds the splits {splits}: point at one, e.g. {path}/train")
    class_labels = {
        name: feature.names
        for name, feature in loaded.features.items()
        if isinstance(feature, datasets.ClassLabel)
    }
    return list(loaded.column_names), _named_classes(loaded, class_labels)


def _named_classes(dataset, class_labels) -> Iterator[tuple[int, dict]]:
    for line, row in enumerate(dataset, start=1):
        for name, classes in class_labels.items():
            value = row[name]
            row[name] = classes[value] if isinstance(value, int) and value >= 0 else None
        yield line, row


SOURCES = {
    "tsv": _delimited("tsv"),
    "csv": _delimited("csv"),
    "jsonl": _jsonl,
    "json": _json,
    "parquet": _parquet,
    "datasets": _datasets,
    "text": _text,
}
