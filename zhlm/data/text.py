"""Raw Chinese text in, clean documents of sentences out, with every repair counted.

Why one module: reading, cleaning and splitting decide together what a "document" and a
"sentence" are, and the rule of the whole pipeline is that nothing is lost silently. Each
function here takes a :class:`Report` and counts every byte it repairs and every item it skips
by reason, so ``zhlm-prepare`` can print exactly what happened to the corpus.

Inputs (see :func:`read_documents`):

* ``.txt`` in the BERT layout (``layout="sentences"``: one sentence per line, a blank line
  between documents) or one document per line (``layout="lines"``);
* ``.jsonl`` with one JSON object per line and the text under ``jsonl_field``;
* either of them gzip-compressed (``.gz``).

Plain files are cut into byte-range shards on document boundaries so several processes can share
one big file; a gzip file is one shard (it cannot be seeked).
"""

import collections
import dataclasses
import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator

from zhlm import paths
from zhlm.errors import UserError

# Full-width ASCII (U+FF01..U+FF5E) maps to ASCII by subtracting 0xFEE0, except the clause and
# sentence punctuation Chinese text is written with: those stay full-width so the text keeps
# its look and the splitter sees one form.
_KEEP_FULL_WIDTH = set("！，：；？（）")
_HALF_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F) if chr(c) not in _KEEP_FULL_WIDTH}
_HALF_WIDTH[0x3000] = 0x20  # ideographic space
# Control characters (Cc) other than tab/newline, format characters that are invisible in
# Chinese text (zero-width spaces and joiners, BOM, bidi marks) and the replacement character
# left by undecodable bytes (counted separately before it is removed).
_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff\ufffd]"
)
_SPACES = re.compile(r"\s+")
# A sentence ends at a run of end punctuation plus the closing quotes and brackets that follow
# it (they belong to the sentence they close). ASCII '.' is not an end mark: it is a decimal point
# or part of a URL far more often than a full stop in Chinese text.
_END = "。！？；…!?;"
_CLOSE = "”’」』）)]】》〉\"'"
_SENTENCE = re.compile(f"[^{re.escape(_END)}]*(?:[{re.escape(_END)}]+[{re.escape(_CLOSE)}]*|$)")
_CONTENT = re.compile(r"[^\W_]")  # a letter, digit or CJK character
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\ufe0f]")
# Where a long sentence is cut: after the last clause mark inside the window, if there is one.
_CLAUSE = "，、：,"


LOCATIONS = 3  # places kept per reason


def _place_order(place: str):
    """``file:line`` and ``file@byte`` by file, then number; a bare file first."""
    path, _, number = place.rpartition("@" if "@" in place else ":")
    return (path, int(number)) if path and number.isdigit() else (place, -1)


@dataclasses.dataclass
class Report:
    """Counts of what went in, what came out, and every repair or skip by reason.

    ``counts`` holds totals (documents, sentences, tokens, instances, ...) and ``reasons`` the
    repaired or skipped items; both are kept per source too. Every reason also keeps where it
    first happened (up to :data:`LOCATIONS` places, ``file:line`` or ``file@byte`` for a document
    in a byte-range shard, or the shard's file for what is decided per shard): the readers set
    ``where`` to the document being processed, so the cleaning, annotation and instance code
    that counts a reason need not know it. Reports merge with ``+=``.
    """

    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    reasons: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    per_source: dict = dataclasses.field(default_factory=dict)
    messages: list = dataclasses.field(default_factory=list)
    locations: dict = dataclasses.field(default_factory=dict)  # reason -> first places
    where: str = ""  # the document (or shard) being processed; not saved

    def count(self, key, n=1, source=None):
        self.counts[key] += n
        if source is not None:
            self.per_source.setdefault(source, collections.Counter())[key] += n

    def reason(self, key, n=1, message=None):
        self.reasons[key] += n
        # A sample of messages (with the file name) is enough to find the bad input.
        if message and self.reasons[key] <= 3:
            self.messages.append(f"{key}: {message}")
        places = self.locations.setdefault(key, [])
        if self.where and len(places) < LOCATIONS and self.where not in places:
            places.append(self.where)

    def __iadd__(self, other):
        self.counts.update(other.counts)
        self.reasons.update(other.reasons)
        for source, counter in other.per_source.items():
            self.per_source.setdefault(source, collections.Counter()).update(counter)
        self.messages.extend(other.messages)
        for key, places in other.locations.items():
            # The first places in file order, whatever order the shards' reports merge in.
            merged = set(self.locations.get(key, [])) | set(places)
            self.locations[key] = sorted(merged, key=_place_order)[:LOCATIONS]
        return self

    def to_dict(self) -> dict:
        """JSON-ready (the dataset's metadata, and the Beam workers' per-split reports)."""
        return {
            "counts": dict(self.counts),
            "reasons": dict(self.reasons),
            "per_source": {k: dict(v) for k, v in self.per_source.items()},
            "messages": list(self.messages),
            "locations": {k: list(v) for k, v in self.locations.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        return cls(
            collections.Counter(d["counts"]),
            collections.Counter(d["reasons"]),
            {k: collections.Counter(v) for k, v in d["per_source"].items()},
            list(d["messages"]),
            {k: list(v) for k, v in d["locations"].items()},
        )

    def format(self) -> str:
        lines = ["counts:"] + [f"  {k}: {v:,}" for k, v in sorted(self.counts.items())]
        lines += ["repaired or skipped, by reason:"]
        lines += [
            f"  {k}: {v:,}"
            + (f" (first at {', '.join(self.locations[k])})" if self.locations.get(k) else "")
            for k, v in sorted(self.reasons.items())
        ] or ["  (none)"]
        for source, counter in sorted(self.per_source.items()):
            counts = sorted(counter.items())  # the order shards merged in must not show
            lines.append(f"source {source}: " + ", ".join(f"{k} {v:,}" for k, v in counts))
        lines += ["examples:"] + [f"  {m}" for m in self.messages[:30]] if self.messages else []
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Shard:
    """A unit of work: documents whose first byte lies in ``[start, end)`` of ``path``."""

    source: str
    path: str
    start: int = 0
    end: int = -1  # -1: to the end of the file
    # The file's path below its glob's fixed folder ("" here: the file's name). It seeds the
    # shard's draws (zhlm.data.pipeline.shard_seed) instead of the whole path, so the same
    # corpus gives the same dataset wherever it lies (a laptop folder, a copy in a bucket).
    name: str = ""


def expand_inputs(patterns, report: Report, shard_bytes: int) -> list[Shard]:
    """Globs (``[name=]GLOB``) to shards. A glob that matches nothing is counted and skipped;
    if none matches anything the run is rejected, since there would be no data at all."""
    shards = []
    for pattern in patterns:
        source, _, glob_ = pattern.rpartition("=") if "=" in pattern else ("", "", pattern)
        files = paths.glob_files(glob_)  # local, or gs:// (zhlm.paths)
        if not files:
            report.where = glob_
            report.reason("empty_glob", message=f"{glob_!r} matched no files")
            continue
        root = _fixed_folder(glob_)
        for path in files:
            size = paths.size(path)
            name = path[len(root) :].lstrip("/") if path.startswith(root) else ""
            if path.endswith(".gz") or size <= shard_bytes:
                shards.append(Shard(source or "train", path, name=name))
            else:
                for start in range(0, size, shard_bytes):
                    end = start + shard_bytes
                    shards.append(Shard(source or "train", path, start, end, name=name))
    if not shards:
        raise UserError(f"no input files: {list(patterns)} matched nothing")
    return shards


def _fixed_folder(pattern: str) -> str:
    """The folder of ``pattern`` above its first wildcard (``/data/news/*/part-*.txt``:
    ``/data/news``; a plain path: its folder)."""
    pattern = pattern if paths.is_remote(pattern) else os.path.expanduser(pattern)
    return re.split(r"[*?[]", pattern, maxsplit=1)[0].rpartition("/")[0]


def _decode(raw: bytes, report: Report, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")
        report.reason("non_utf8_bytes", text.count("\ufffd"), f"{where}: undecodable bytes")
        return text


def _raw_lines(shard: Shard, report: Report) -> Iterator[bytes]:
    """Binary lines of a shard. Plain files are read from ``start`` (aligned to a line start)
    until the first line starting at or after ``end``; the caller finishes the document."""
    if shard.path.endswith(".gz"):
        try:
            with paths.open_binary(shard.path) as raw, gzip.open(raw, "rb") as f:
                yield from f
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
            # Keep what was read: the documents before the damage are good.
            report.where = shard.path
            report.reason("truncated_gzip", message=f"{shard.path}: {e}; kept the text before it")
        return
    with paths.open_binary(shard.path) as f:
        if shard.start > 0:
            f.seek(shard.start - 1)
            f.readline()  # finish the line the previous shard owns
        pos = f.tell()
        for line in f:
            yield (pos, line) if shard.end >= 0 else line
            pos += len(line)


def _previous_line_blank(path: str, pos: int) -> bool:
    if pos == 0:
        return True
    with paths.open_binary(path) as f:
        f.seek(max(0, pos - 4096))
        before = f.read(pos - max(0, pos - 4096))
    return not before[:-1].rsplit(b"\n", 1)[-1].strip()


def _documents_raw(shard: Shard, layout: str, report: Report) -> Iterator[list[bytes]]:
    """Documents as lists of raw lines, owned by the shard (see :class:`Shard`); before each
    is yielded, ``report.where`` names where it starts (``file:line``, or ``file@byte`` in a
    byte range after the first, whose line numbers would need the whole file before it)."""
    ranged = shard.end >= 0 and not shard.path.endswith(".gz")
    lines = _raw_lines(shard, report)

    def at(number, pos):  # line numbers count from the file's start, which a later range lacks
        return f"{shard.path}:{number}" if shard.start == 0 else f"{shard.path}@{pos}"

    if layout == "lines" or shard.path.endswith((".jsonl", ".jsonl.gz")):
        for number, item in enumerate(lines, 1):
            pos, line = item if ranged else (0, item)
            if ranged and pos >= shard.end:
                return
            report.where = at(number, pos)
            yield [line]
        return
    doc: list[bytes] = []
    # In a ranged shard the first lines may finish a document that began in the previous shard.
    in_owned = not ranged or _previous_line_blank(shard.path, shard.start)
    for number, item in enumerate(lines, 1):
        pos, line = item if ranged else (0, item)
        if not line.strip():
            if doc:
                yield doc
                doc = []
            in_owned = True
            if ranged and pos >= shard.end:
                return
            continue
        if not doc and ranged and pos >= shard.end:
            return
        if in_owned:
            if not doc:
                report.where = at(number, pos)
            doc.append(line)
    if doc:
        yield doc


DIALOGUE_HINT = (
    '{0}: dialogue records ({{"turns": [...]}}) in a text source; name the file as a '
    "dialogue source: --config.data.input=\"('dialogue={0}',)\" "
    "--config.data.dialogue_sources=\"('dialogue',)\""
)


def read_documents(shard: Shard, layout: str, jsonl_field: str, report: Report):
    """Decoded, uncleaned documents (lists of lines) of one shard, counting bad input."""
    where = shard.path
    n = 0
    for raw_doc in _documents_raw(shard, layout, report):
        n += 1
        if shard.path.endswith((".jsonl", ".jsonl.gz")):
            line = _decode(raw_doc[0], report, where)
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                text = record[jsonl_field]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                if isinstance(e, KeyError) and isinstance(record, dict) and "turns" in record:
                    report.reason("dialogue_in_text_source", message=DIALOGUE_HINT.format(where))
                else:
                    report.reason("bad_json_line", message=f"{where}: {type(e).__name__} {e}")
                continue
            if not isinstance(text, str):
                report.reason("bad_json_line", message=f"{where}: {jsonl_field!r} is not text")
                continue
            yield text.splitlines() or [""]
        else:
            yield [_decode(line, report, where) for line in raw_doc]
    report.where = shard.path  # what follows is decided for the shard as a whole
    if n == 0 and shard.start == 0:
        report.reason("empty_file", message=f"{where}: no text")


def json_objects(shard: Shard, report: Report):
    """The JSON objects of a JSON-lines shard, one a line (blank lines skipped, bad ones
    counted): the reader of records that are not one text, such as dialogues' turns."""
    for raw_doc in _documents_raw(shard, "lines", report):
        line = _decode(raw_doc[0], report, shard.path)
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as e:
            report.reason("bad_json_line", message=f"{shard.path}: {type(e).__name__} {e}")
    report.where = shard.path  # what follows is decided for the shard as a whole


def clean(text: str, report: Report, converter=None) -> str:
    """Normalise one line: full-width ASCII to half-width (Chinese punctuation kept), control
    and zero-width characters removed, whitespace collapsed, optionally traditional to
    simplified (``converter`` is an ``opencc.OpenCC('t2s')``)."""
    text = text.translate(_HALF_WIDTH)
    removed = _CONTROL.subn("", text)
    if removed[1]:
        text = removed[0]
        report.reason("control_chars_removed", removed[1])
    text = _SPACES.sub(" ", text).strip()
    if converter is not None and text:
        simplified = converter.convert(text)
        if simplified != text:
            report.reason("traditional_converted_lines")
            text = simplified
    return text


def _cut(sentence: str, max_chars: int, report: Report) -> list[str]:
    pieces = []
    while len(sentence) > max_chars:
        window = sentence[:max_chars]
        cut = max(window.rfind(c) for c in _CLAUSE) + 1
        cut = cut if cut > max_chars // 2 else max_chars
        pieces.append(sentence[:cut])
        sentence = sentence[cut:]
    report.reason("long_sentence_cut", len(pieces))
    return pieces + ([sentence] if sentence else [])


def split_sentences(line: str, max_chars: int, report: Report) -> list[str]:
    """Chinese sentences of one clean line; closing quotes and brackets stay with their sentence
    and sentences over ``max_chars`` are cut (at a clause mark where possible), never dropped."""
    out = []
    for s in _SENTENCE.findall(line):
        s = s.strip()
        if not s:
            continue
        out.extend(_cut(s, max_chars, report) if len(s) > max_chars else [s])
    return out


def document_sentences(lines, report: Report, max_chars: int, converter=None):
    """Clean a document and split it into sentences; ``None`` (counted) if nothing is left
    that a model could learn from (empty, whitespace, punctuation or emoji only)."""
    sentences = []
    for line in lines:
        sentences.extend(split_sentences(clean(line, report, converter), max_chars, report))
    if not any(_CONTENT.search(s) for s in sentences):
        report.reason("document_without_text")
        return None
    joined = "".join(sentences)
    emoji = len(_EMOJI.findall(joined))
    if emoji:
        report.reason("emoji_chars_kept_as_unk", emoji)
    if not _CJK.search(joined):
        report.reason("document_without_chinese_kept")
    return sentences
