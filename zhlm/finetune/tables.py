"""Classification and sentence-pair data in the layouts public Chinese datasets come in.

Why one reader for every layout: the same task ships as ``label<TAB>text`` with a header
(ChnSentiCorp), ``text<TAB>label`` without one (the THUCNews title set), CSV with quotes and a
BOM (most sentiment and matching sets), JSON lines (CLUE), parquet or a Hugging Face
``datasets`` folder. Each format only turns the file into rows; where the texts and the label
are is said once, the same way for all (``config.task.text_fields`` / ``label_field``), and the
checks and the report (:mod:`zhlm.finetune.report`) are shared. Parsing is the kept libraries'
(``csv``, ``json``, ``pyarrow``, ``datasets``), never ours.

Formats (``config.task.format``):
* ``tsv``: tab-separated, read by ``csv`` without quoting (a ``"`` in a review is text, as in
  BERT's ``_read_tsv``). ``csv``: comma-separated, RFC 4180 quoting (commas, newlines, ``""``
  inside quotes). Both take CRLF line endings and a UTF-8 BOM.
* ``jsonl``: one JSON object per line; ``json``: one JSON list of objects.
* ``parquet`` (pyarrow); ``datasets``: a folder that ``Dataset.save_to_disk`` wrote (one split;
  ``ClassLabel`` ids become their names, -1 no label). Their "line" is the 1-based row.

Where the fields are: names, or 0-based column positions for files without a header. Left
empty, a header row (or the JSON keys) is searched for the usual names (``label``, ``text_a``,
``sentence1``, ...); a file without a header has the label last and the text(s) before it. The
first row of a TSV/CSV is a header when a field of it is a usual name or a name given.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence

from zhlm.finetune.report import (
    EMPTY_TEXT,
    MALFORMED_LINE,
    MISSING_FIELD,
    NO_GOLD_LABEL,
    UNKNOWN_LABEL,
    Path,
    PositionDecoder,
    ReadReport,
    finish,
    guid,
    lines,
    read_utf8,
)

FORMATS = ("tsv", "csv", "jsonl", "json", "parquet", "datasets")
DELIMITERS = {"tsv": "\t", "csv": ","}
_NO_GOLD = "-"
# Header names accepted for each field, so that CLUE, ERNIE, XNLI and HF exports all read.
TEXT_NAMES = ("text_a", "text", "sentence", "sentence1", "s1", "premise", "question1", "query1")
TEXT_NAMES += ("review", "content", "title", "query", "question")
TEXT_B_NAMES = ("text_b", "sentence2", "s2", "hypo", "hypothesis", "question2", "query2")
LABEL_NAMES = ("label", "gold_label", "labels", "class", "sentiment")
KNOWN_NAMES = frozenset(TEXT_NAMES + TEXT_B_NAMES + LABEL_NAMES)
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a bad byte


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
class Layout:
    """Keys of the texts and the label in each row: names, or int positions."""

    texts: tuple[str | int, ...]
    label: str | int | None


def read_table(
    path: Path,
    fmt: str,
    kind: str = "classification",
    text_fields: Sequence[str | int] = (),
    label_field: str | int = "",
    labels: Sequence[str] | None = None,
    require_label: bool = True,
    default: Layout | None = None,
) -> tuple[list[SentenceExample | PairExample], ReadReport]:
    """Examples of one file (see the module docstring). ``labels=None`` accepts any label;
    ``default`` is the layout of a headerless file when no field is given (else label last)."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    report = ReadReport(os.fspath(path))
    texts, label = parse_fields(text_fields), parse_field(label_field)
    n_texts = 2 if kind == "pair" else 1
    if texts and len(texts) != n_texts:
        raise ValueError(f"config.task.text_fields={texts}: kind {kind!r} reads {n_texts} text(s)")
    columns, rows = _SOURCES[fmt](path, report, {f for f in (*texts, label) if isinstance(f, str)})
    default = default or Layout(tuple(range(n_texts)), n_texts)
    layout = _layout(path, columns, texts, label, default, n_texts, require_label)
    examples = []
    for line, row in rows:
        if fmt in DELIMITERS:
            row = _fields_row(row, columns, layout, fmt, report, line)
            if row is None:
                continue
        value = row.get(layout.label) if layout.label is not None else None
        label_text = _check_label(value, labels, require_label, report, line, layout.label)
        if label_text is _SKIP or not _nonempty(row, layout.texts, report, line):
            continue
        key = str(row["id"]) if isinstance(row.get("id"), (str, int)) else guid(path, line)
        values = [row[t] for t in layout.texts]
        example = PairExample if kind == "pair" else SentenceExample
        examples.append(example(key, *values, label_text, line))
    report.issues.sort(key=lambda issue: issue.line or 0)  # the sources report ahead of rows
    return finish(examples, report)


def parse_fields(fields: Sequence[str | int] | str) -> tuple[str | int, ...]:
    """``text_fields`` as keys: ``"a,b"`` splits, digits are positions (the command line gives
    ``--config.task.text_fields=0`` as ``(0,)`` and ``=s1,s2`` as ``("s1,s2",)``)."""
    if isinstance(fields, (str, int)):
        fields = (fields,)
    parts = [p for f in fields for p in (f.split(",") if isinstance(f, str) else [f])]
    return tuple(parse_field(p) for p in parts if parse_field(p) is not None)


def parse_field(field: str | int) -> str | int | None:
    if isinstance(field, int):
        return field
    field = field.strip()
    return int(field) if field.isdigit() else (field or None)


# ------------------------------------------------------------------------------ row sources
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


def _fields_row(fields, header, layout, fmt, report, line) -> dict | None:
    """A TSV/CSV record as {column: field}, keyed by header name or else by position. It must
    have every column; a text in the last column takes any fields after it (THUCNews bodies hold
    tabs, and so may a review), a record one field short or long is reported."""
    keys = header or list(range(max(k for k in (*layout.texts, layout.label) if k is not None) + 1))
    if len(fields) > len(keys) and keys[-1] in layout.texts:
        fields = fields[: len(keys) - 1] + [DELIMITERS[fmt].join(fields[len(keys) - 1 :])]
    if len(fields) != len(keys):
        report.add(MALFORMED_LINE, line, _count_message(fields, len(keys), fmt))
        return None
    return dict(zip(keys, fields, strict=True))


def _count_message(fields, expected, fmt) -> str:
    kind = "tab" if fmt == "tsv" else "comma"
    return f"{len(fields)} {kind}-separated fields, expected {expected}"


def _chain(first, rest):
    yield from first
    yield from rest


def _jsonl(path, report, names):
    rows = list(_jsonl_rows(path, report))
    return _keys(rows), iter(rows)


def _jsonl_rows(path, report) -> Iterator[tuple[int, dict]]:
    for line, text in lines(path, report):
        try:
            item = json.loads(text)
        except json.JSONDecodeError as error:
            report.add(MALFORMED_LINE, line, f"invalid JSON: {error.msg} at column {error.colno}")
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


def _keys(rows) -> list[str]:
    """Column names of JSON rows: the keys in the order they first appear."""
    return list(dict.fromkeys(key for _, row in rows[:100] for key in row))


def _parquet(path, report, names):
    import pyarrow
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pyarrow.ArrowInvalid, OSError) as error:
        report.add(MALFORMED_LINE, None, f"not a parquet file: {error}")
        return None, iter(())
    return table.column_names, enumerate(table.to_pylist(), start=1)


def _datasets(path, report, names):
    try:
        import datasets
    except ImportError as error:
        raise ImportError("format datasets needs `pip install 'zhlm[datasets]'`") from error
    loaded = datasets.load_from_disk(os.fspath(path))
    if isinstance(loaded, datasets.DatasetDict):
        splits = ", ".join(loaded)
        raise ValueError(f"{path} holds the splits {splits}: point at one, e.g. {path}/train")
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


_SOURCES = {
    "tsv": _delimited("tsv"),
    "csv": _delimited("csv"),
    "jsonl": _jsonl,
    "json": _json,
    "parquet": _parquet,
    "datasets": _datasets,
}


# ---------------------------------------------------------------------------------- layout


def _layout(path, columns, texts, label, default, n_texts, require_label) -> Layout:
    """The keys to read: the given fields, else the default for a headerless file, else the
    usual names in ``columns``."""
    if columns is None:
        named = [f for f in (*texts, label) if isinstance(f, str)]
        if named:
            raise ValueError(f"{path}: no header row naming {', '.join(named)}")
        if not texts and label is None:
            return default
        if texts and label is None and not require_label:
            return Layout(texts, None)  # inputs to predict: only the texts are there
        # One of them given: the other is in the first columns left.
        left = [i for i in range(n_texts + 1) if i != label and i not in texts]
        return Layout(texts or tuple(left[:n_texts]), left[0] if label is None else label)
    texts = tuple(_column(path, columns, t) for t in texts)
    if label is None:
        label = first_column(columns, LABEL_NAMES)
    else:
        label = _column(path, columns, label)
    if not texts:
        texts = default_texts(columns, label, n_texts)
    if len(texts) != n_texts or (label is None and require_label):
        raise ValueError(
            f"{path}: which columns hold the text(s) and the label? It has {columns}: pass "
            "--config.task.text_fields=NAME[,NAME] and --config.task.label_field=NAME"
        )
    return Layout(texts, label)


def _column(path, columns: list[str], field: str | int) -> str:
    """The column a given field names: a name (case-insensitive) or a position."""
    if isinstance(field, int):
        if field >= len(columns):
            raise ValueError(f"{path}: column {field} asked for, the file has {len(columns)}")
        return columns[field]
    match = first_column(columns, (field,))
    if match is None:
        raise ValueError(f"{path}: no column {field!r} (it has {columns})")
    return match


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


# ---------------------------------------------------------------------------------- checks

# Returned by _check_label for a record that must be skipped (None means "no label, keep").
_SKIP = object()


def _check_label(value, labels, require_label, report, line, key="label"):
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # parquet columns with gaps hold 1.0 for 1
    if value is None or (isinstance(value, str) and not value.strip()) or value != value:
        if require_label:
            report.add(MISSING_FIELD, line, f"no {_name(key)}")
            return _SKIP
        return None
    label = str(value).strip()
    if label == _NO_GOLD:
        if require_label:
            report.add(NO_GOLD_LABEL, line, f"{_name(key)} '-': annotators did not agree")
            return _SKIP
        return None
    if labels is not None and label not in labels:
        report.add(UNKNOWN_LABEL, line, f"{_name(key)} {label!r} not in {list(labels)}")
        return _SKIP
    return label


def _nonempty(row: dict, names: Sequence, report: ReadReport, line: int) -> bool:
    """Whether each named text is present, a string and not blank; reports the first that is not."""
    for name in names:
        value = row.get(name)
        if value is None:
            report.add(MISSING_FIELD, line, f"no {_name(name)}")
            return False
        if not isinstance(value, str):
            report.add(MALFORMED_LINE, line, f"{_name(name)} is a {type(value).__name__}, not text")
            return False
        if not value.strip():
            report.add(EMPTY_TEXT, line, f"{_name(name)} is empty")
            return False
    return True


def _name(key: str | int | None) -> str:
    return f"column {key}" if isinstance(key, int) else str(key or "label")
