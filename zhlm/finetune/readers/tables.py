"""Classification and sentence-pair data in the layouts public Chinese datasets come in.

Why one reader for every layout: the same task ships as ``label<TAB>text`` with a header
(ChnSentiCorp), ``text<TAB>label`` without one (the THUCNews title set), CSV with quotes and a
BOM (most sentiment and matching sets), JSON lines (CLUE), parquet or a Hugging Face
``datasets`` folder. Each format only turns the file into rows; where the texts and the label
are is said once, the same way for all (``config.task.text_fields`` / ``label_field``), and the
checks and the report (:mod:`zhlm.finetune.readers.report`) are shared. Parsing is the kept
libraries' (``csv``, ``json``, ``pyarrow``, ``datasets``), never ours.

Formats (``config.task.format``):
* ``tsv``: tab-separated, read by ``csv`` without quoting (a ``"`` in a review is text, as in
  BERT's ``_read_tsv``). ``csv``: comma-separated, RFC 4180 quoting (commas, newlines, ``""``
  inside quotes). Both take CRLF line endings and a UTF-8 BOM.
* ``jsonl``: one JSON object per line; ``json``: one JSON list of objects.
* ``parquet`` (pyarrow); ``datasets``: a folder that ``Dataset.save_to_disk`` wrote (one split;
  ``ClassLabel`` ids become their names, -1 no label). Their "line" is the 1-based row.
* ``text``: plain text, one input a line, no header and no label (inputs to predict): the line
  is the text, or for a pair the texts before and after its tab; a line with another number of
  tabs is reported (the file is likely a table, e.g. with a label column).

Where the fields are: names, or 0-based column positions for files without a header. Left
empty, a header row (or the JSON keys) is searched for the usual names (``label``, ``text_a``,
``sentence1``, ...); a file without a header has the label last and the text(s) before it. The
first row of a TSV/CSV is a header when a field of it is a usual name or a name given.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Container, Iterator, Sequence

from zhlm.errors import UserError
from zhlm.finetune.readers import sniff
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.labels import LabelNames, Spelling
from zhlm.finetune.readers.report import (
    EMPTY_TEXT,
    LABEL_RESPELLED,
    MALFORMED_LINE,
    MISSING_FIELD,
    NO_GOLD_LABEL,
    UNKNOWN_LABEL,
    Path,
    ReadReport,
    counted,
    finish,
    guid,
)
from zhlm.finetune.readers.rows import (
    DELIMITERS,
    LABEL_NAMES,
    PLAIN,
    SOURCES,
    default_texts,
    fields_row,
    first_column,
)

FORMATS = tuple(SOURCES)  # tsv, csv, jsonl, json, parquet, datasets, text (PLAIN)
_NO_GOLD = "-"


class Numbers:
    """The labels a regression reads: every finite number written as text (``"3.8"``, ``"4"``),
    as a label set the table reader asks with ``in``."""

    def __contains__(self, label) -> bool:
        try:
            return math.isfinite(float(label))
        except (TypeError, ValueError):
            return False

    def __str__(self) -> str:
        return "the finite numbers"


NUMBERS = Numbers()


@dataclasses.dataclass(frozen=True)
class SentenceExample:
    guid: str
    text: str
    label: str | None = None
    line: int = 0


@dataclasses.dataclass(frozen=True)
class PairExample:
    guid: str
    text_a: str
    text_b: str
    label: str | None = None
    line: int = 0


@dataclasses.dataclass(frozen=True)
class Layout:
    """Keys of the texts and the label in each row: names, or int positions."""

    texts: tuple[str | int, ...]
    label: str | int | None


def read_table(path: Path, fmt: str, *args, **kwargs) -> tuple[list, ReadReport]:
    """``(examples, report)`` of one file, read whole; the arguments are :func:`iter_table`'s."""
    examples, report = iter_table(path, fmt, *args, **kwargs)
    return finish(list(examples), report)


def iter_table(
    path: Path,
    fmt: str,
    texts: int = 1,
    text_fields: Sequence[str | int] = (),
    label_field: str | int = "",
    labels: Container[str] | None = None,
    require_label: bool = True,
    names: LabelNames | None = None,
) -> tuple[Iterator[SentenceExample | PairExample], ReadReport]:
    """Examples of one file as its rows are read (see the module docstring), ``texts`` texts
    each (1: sentences, 2: pairs), and the report, complete once they are. ``labels=None``
    accepts any label; ``labels`` need only answer ``in`` and say what they are when printed (a
    regression's are every number, not a list, and are read as written); a sequence of them
    also says how a number is spelled (:class:`~zhlm.finetune.readers.labels.Spelling`).
    ``names`` (a label-names file) turns each label id into its name before ``labels`` are
    asked. A headerless file without fields given has the label last. The header and the
    fields are settled here, before the first example, so a layout that does not fit fails at
    once."""
    if fmt not in FORMATS:
        raise UserError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    report = ReadReport(os.fspath(path))
    n_texts = texts
    texts, label = parse_fields(text_fields), parse_field(label_field)
    if texts and len(texts) != n_texts:
        raise UserError(f"config.task.text_fields={texts}: this task reads {n_texts} text(s)")
    columns, rows = SOURCES[fmt](path, report, {f for f in (*texts, label) if isinstance(f, str)})
    default = Layout(tuple(range(n_texts)), n_texts)
    if fmt == PLAIN:
        if require_label:
            labelled = ", ".join(f for f in FORMATS if f != PLAIN)
            raise UserError(f"{path}: format text holds no labels; train from {labelled}")
        layout = Layout(default.texts, None)  # the line is the text(s): no field to name
    else:
        layout = _layout(path, columns, texts, label, default, n_texts, require_label)
    example = PairExample if n_texts == 2 else SentenceExample
    label_reader = _LabelReader(labels, require_label, names, report, layout.label)
    examples = _examples(path, fmt, rows, columns, layout, label_reader, example, report)
    return counted(examples, report), report


def _examples(path, fmt, rows, columns, layout, label_reader, example, report):
    for line, row in rows:
        if fmt in DELIMITERS:
            row = fields_row(row, columns, layout, fmt, report, line)
            if row is None:
                continue
        value = row.get(layout.label) if layout.label is not None else None
        label_text = label_reader(value, line)
        if label_text is _SKIP or not _nonempty(row, layout.texts, report, line):
            continue
        key = str(row["id"]) if isinstance(row.get("id"), (str, int)) else guid(path, line)
        yield example(key, *[row[t] for t in layout.texts], label_text, line)


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


# ---------------------------------------------------------------------------------- layout


def _layout(path, columns, texts, label, default, n_texts, require_label) -> Layout:
    """The keys to read: the given fields, else the default for a headerless file, else the
    usual names in ``columns``."""
    if columns is None:
        named = [f for f in (*texts, label) if isinstance(f, str)]
        if named:
            raise UserError(f"{path}: no header row naming {', '.join(named)}")
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
        flags = "--config.task.text_fields=NAME[,NAME]"
        if require_label:
            flags += " and --config.task.label_field=NAME"
        what = " and the label" if require_label else ""
        raise UserError(
            f"{path}: which columns hold the text(s){what}? It has {columns}: pass {flags}"
        )
    return Layout(texts, label)


def _column(path, columns: list[str], field: str | int) -> str:
    """The column a given field names: a name (case-insensitive) or a position."""
    if isinstance(field, int):
        if field >= len(columns):
            raise UserError(f"{path}: column {field} asked for, the file has {len(columns)}")
        return columns[field]
    match = first_column(columns, (field,))
    if match is None:
        raise UserError(f"{path}: no column {field!r} (it has {columns})")
    return match


# ---------------------------------------------------------------------------------- checks

# Returned by _LabelReader for a record that must be skipped (None means "no label, keep").
_SKIP = object()


class _LabelReader:
    """``reader(value, line)``: a record's label as text (see :func:`iter_table`), None for a
    record to predict without one, or :data:`_SKIP` for a record left out (reported)."""

    def __init__(self, labels, require_label, names, report, key):
        self.labels, self.require_label, self.names = labels, require_label, names
        self.report, self.key = report, key
        given = labels if isinstance(labels, Sequence) and names is None else ()
        # A regression's scores are read as written; so are labels of inputs to predict.
        self.spelling = None if labels is NUMBERS or not require_label else Spelling(given)
        self.respelled: set[str] = set()  # each respelling is reported once

    def __call__(self, value, line):
        name, report = _name(self.key), self.report
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # parquet columns with gaps hold 1.0 for 1
        if value is None or (isinstance(value, str) and not value.strip()) or value != value:
            if self.require_label:
                report.add(MISSING_FIELD, line, f"no {name}")
                return _SKIP
            return None
        label = str(value).strip()
        if label == _NO_GOLD:
            if self.require_label:
                report.add(NO_GOLD_LABEL, line, f"{name} '-': annotators did not agree")
                return _SKIP
            return None
        label = self._spelled(label, line)
        if self.names is not None:
            label = self._named(label, line)
        if self.labels is not None and label not in self.labels:
            labels = self.labels
            shown = list(labels) if isinstance(labels, Sequence) else labels
            report.add(UNKNOWN_LABEL, line, f"{name} {label!r} not in {shown}")
            return _SKIP
        return label

    def _spelled(self, label: str, line: int) -> str:
        spelled = label if self.spelling is None else self.spelling(label)
        if spelled != label and label not in self.respelled:
            self.respelled.add(label)
            message = f"{label!r} read as {spelled!r}: equal numbers are one label"
            self.report.add(LABEL_RESPELLED, line, f"{_name(self.key)} {message}", dropped=False)
        return spelled

    def _named(self, label: str, line: int) -> str:
        name = self.names.name(label)
        if name is None:
            raise UserError(
                f"{self.report.path}:{line}: label {label!r} has no name in {self.names.path} "
                f"(it names {self.names.describe()}): give the names file of this data"
            )
        return name


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


@dataclasses.dataclass(frozen=True)
class TableReader(Reader):
    """Tables of sentences (``texts=1``) or pairs (``texts=2``) with a class label, or with a
    score when ``scores`` (a regression: every finite number is a label)."""

    texts: int = 1
    scores: bool = False
    formats: tuple[str, ...] = FORMATS

    @property
    def example_type(self) -> type:
        return PairExample if self.texts == 2 else SentenceExample

    @property
    def takes_label_names(self) -> bool:
        return not self.scores

    def read(self, path, task, require_label=True):
        names = None
        if self.scores:
            labels = NUMBERS
        elif not require_label:  # inputs to predict: their labels (and names) are not read
            labels = None
        else:  # empty: any
            names = LabelNames.read(task.label_names) if task.label_names else None
            labels = list(task.labels) or None
            labels = names.given(labels) if names and labels else labels
        fields = (task.text_fields, task.label_field, labels, require_label, names)
        return iter_table(path, task.format, self.texts, *fields)

    def describe(self, path, task):
        return f"the file looks like: {sniff.describe(path, self.texts)}"
