"""What a table file looks like, for the error when none of its records could be read.

Why: "0 records, 1200 skipped [malformed_line=1200]" does not say what to change. The usual
causes are the wrong format (a CSV read as TSV), the label in another column, or a header whose
names were not recognised; the first rows tell which, so the error can name the flags that fix
it. The delimiter is found by ``csv.Sniffer``; a column looks like labels when it has few
distinct, short values.
"""

from __future__ import annotations

import codecs
import collections
import csv
import io
import json
import os

from zhlm.finetune.readers.rows import LABEL_NAMES, default_texts, first_column, is_header

SAMPLE_BYTES = 1 << 16
SAMPLE_ROWS = 200
_DELIMITER_NAMES = {"\t": "tab", ",": "comma", ";": "semicolon", "|": "pipe"}
_FORMAT_OF = {"\t": "tsv", ",": "csv"}


def describe(path, texts: int = 1) -> str:
    """``"<what the file looks like>; try <flags>"`` (the flags only where a guess is sound)."""
    if os.path.isdir(path):
        return "a folder: only format datasets reads one (a Dataset.save_to_disk folder)"
    with open(path, "rb") as f:
        raw = f.read(SAMPLE_BYTES)
    head = raw.decode("utf-8-sig", errors="replace")
    if os.fspath(path).endswith(".parquet") or raw.startswith(b"PAR1"):
        return _parquet(path)
    if not _decodes(raw, "utf-8"):
        return _not_utf8(raw)
    stripped = head.lstrip()
    if stripped.startswith(("{", "[")):
        return _json(stripped, texts)
    return _delimited(head, texts)


def _decodes(raw: bytes, encoding: str) -> bool:
    try:  # not final: the sample may end inside a character
        codecs.getincrementaldecoder(encoding)().decode(raw, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _not_utf8(raw: bytes) -> str:
    """What a sample that is not UTF-8 is, as far as a BOM and GBK can tell."""
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "UTF-16 text, not UTF-8 (its BOM says so): iconv -f UTF-16 -t UTF-8 converts it"
    if _decodes(raw, "gbk") and _mostly_common_hanzi(raw.decode("gbk", errors="ignore")):
        return "not UTF-8 text (GBK, as many Chinese files are: iconv -f GBK -t UTF-8 converts it)"
    return (
        "neither UTF-8 nor GBK text (the encodings tried): `file -i` may name its encoding; "
        "iconv -f THAT -t UTF-8 converts it"
    )


def _mostly_common_hanzi(text: str) -> bool:
    """Whether nine in ten characters beyond ASCII are in GB2312, the common Chinese set: bytes
    of other encodings (Latin-1 accents before ASCII letters) read as rare GBK characters."""
    wide = [c for c in text if ord(c) > 127]
    common = sum(_encodes(c, "gb2312") for c in wide)
    return bool(wide) and common >= 0.9 * len(wide)


def _encodes(char: str, encoding: str) -> bool:
    try:
        char.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


def _delimited(head: str, texts: int) -> str:
    rows = head.splitlines()[:SAMPLE_ROWS]
    sample = "\n".join(rows[:-1] if len(rows) > 1 else rows)  # the last one may be cut short
    try:
        delimiter = csv.Sniffer().sniff(sample, delimiters="".join(_DELIMITER_NAMES)).delimiter
    except csv.Error:
        return (
            "one field a line: no tab or comma between fields (plain text, a text a line, is "
            "--config.task.format=text, for prediction)"
        )
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    rows = [r for r in csv.reader(io.StringIO(sample), delimiter=delimiter, quoting=quoting) if r]
    header = rows[0] if rows and is_header(rows[0]) else None
    data = rows[1:] if header else rows
    width = collections.Counter(len(r) for r in data).most_common(1)[0][0] if data else 0
    what = f"{_DELIMITER_NAMES[delimiter]}-delimited, {width} columns, "
    what += f"header {header}" if header else "no header"
    columns = [r for r in data if len(r) == width]
    keys = [c.strip() for c in header] if header and len(header) == width else list(range(width))
    fmt = _FORMAT_OF.get(delimiter)
    if fmt is None:
        return what + " (TSV and CSV are read: convert the file)"
    return what + _fields(fmt, keys, [dict(zip(keys, r, strict=True)) for r in columns], texts)


def _json(text: str, texts: int) -> str:
    decoder = json.JSONDecoder()
    if text.startswith("["):
        fmt, what, text = "json", "a JSON list", text[1:].lstrip()
    else:
        fmt, what = "jsonl", "JSON lines"
    try:
        first, _ = decoder.raw_decode(text)
    except json.JSONDecodeError:
        return f"{what} whose first item is not valid JSON"
    if not isinstance(first, dict):
        return f"{what} of {type(first).__name__}, not objects"
    rows = [first]
    if fmt == "jsonl":
        for line in text.splitlines()[1:SAMPLE_ROWS]:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
    rows = [r for r in rows if isinstance(r, dict)]
    return f"{what} of objects with keys {list(first)}" + _fields(fmt, list(first), rows, texts)


def _parquet(path) -> str:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        return f"a parquet file with columns {pq.read_schema(path).names}"
    except (pyarrow.ArrowInvalid, OSError) as error:
        return f"not a parquet file ({error})"


def _fields(fmt: str, keys: list, rows: list[dict], n_texts: int) -> str:
    """Where the label seems to be, and the flags that would read the file so."""
    named = [k for k in keys if isinstance(k, str)]
    label = first_column(named, LABEL_NAMES)
    if label is None or not _looks_like_labels([r.get(label) for r in rows]):
        # By content: a header whose names are swapped must not send the user back to them.
        label = label_column(keys, rows)
    if label is None:
        return f"; no column looks like labels: try --config.task.format={fmt} and name them"
    values = sorted({str(r[label]) for r in rows if label in r})
    texts = default_texts(named, label, n_texts) if named else ()
    if not texts or label in texts:
        texts = [k for k in keys if k != label and str(k).lower() not in ("id", "idx", "qid")]
    text_flag = ",".join(str(k) for k in texts[:n_texts])
    shown = ", ".join(_short(v) for v in values[:8]) + (", ..." if len(values) > 8 else "")
    return (
        f"; column {label!r} looks like labels ({len(values)} values: {shown}); try "
        f"--config.task.format={fmt} --config.task.text_fields={text_flag} "
        f"--config.task.label_field={label}"
    )


def label_column(keys: list, rows: list[dict]):
    """The column with the fewest distinct short values, or None when none has few."""
    best = None
    for key in keys:
        values = [str(r[key]) for r in rows if r.get(key) is not None]
        if not _looks_like_labels(values):
            continue
        score = (len(set(values)), sum(map(len, values)) / len(values))
        best = min(best, (score, key), key=lambda s: s[0]) if best else (score, key)
    return None if best is None else best[1]


def _looks_like_labels(values: list) -> bool:
    """Whether a column's values are few distinct short ones, as labels are."""
    values = [str(v) for v in values if v is not None]
    if not values:
        return False
    distinct = len(set(values))
    return distinct <= max(2, len(values) // 3) and sum(map(len, values)) / len(values) <= 16


def _short(value: str, limit: int = 20) -> str:
    return value if len(value) <= limit else value[:limit] + "..."
