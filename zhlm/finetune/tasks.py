"""The fine-tuning tasks as data: read and split the files, and featurize sentences and pairs.

The kinds share one model interface (fixed ``[N, max_seq_length]`` int32 arrays):

* ``classification``: ``[CLS] text [SEP]``; ``pair``: ``[CLS] a [SEP] b [SEP]`` with segment ids
  0/1, the longer text losing its last token first until the pair fits (BERT's
  ``_truncate_seq_pair``).
* ``mrc``: span extraction, windows and answers in :mod:`zhlm.finetune.mrc`.
* ``ner``: token classification, in :mod:`zhlm.finetune.ner_features`.

Reading settles the label set too: an empty ``task.labels`` becomes the training file's labels
(:func:`resolve_labels`) and is written back into ``task``, so the head, the metrics and the
saved config all see the same order.

Training reads a file whole (:func:`read_file`); prediction streams it (:func:`stream_file`), so
that any file size fits in the same memory. A file's report is printed once: by read_file, or by
zhlm-predict after the last record.

Why the split helpers: LCQMC and CMRC 2018 have no offline training file, so a config may hold
out the *last* fraction of one file (records, or whole passages for MRC so that no passage is in
both halves). Deterministic and documented in the config, so every run sees the same halves.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Sequence

import numpy as np

from zhlm import paths
from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune import ner, readers, sniff, tables
from zhlm.finetune.report import finish

KINDS = ("classification", "pair", "mrc", "ner")
TABLE_FORMATS = tables.FORMATS


def _table(fmt, kind="", text_fields=None, label_field=None, default=None):
    """The stream of a table format; the old format names fix the kind and the fields."""

    def stream(path, task, need=True):
        texts = task.text_fields if text_fields is None else text_fields
        label = task.label_field if label_field is None else label_field
        labels = list(task.labels) or None
        args = (kind or task.kind, texts, label, labels, need, default)
        return tables.iter_table(path, fmt, *args)

    return stream


# Reader name (config.task.format) -> stream(path, task, need) -> (examples as they are read,
# report complete once they are). An empty task.labels reads every label (read_task then infers
# the set from the training file). ``need`` False: inputs to predict, whose labels (answers) may
# be absent. Every format but ``squad`` and ``json`` (one JSON document each, parsed whole) is
# read a record at a time.
STREAMS = {
    **{fmt: _table(fmt) for fmt in TABLE_FORMATS},
    # The names of the formats before there were text_fields/label_field, kept as they read.
    "sentence_tsv": _table("tsv", "classification", (), "", readers.SENTENCE_TSV),
    "pair_tsv": _table("tsv", "pair", (), ""),
    "pair_jsonl": _table("jsonl", "pair", ("sentence1", "sentence2"), "label"),
    "squad": lambda path, task, need=True: _whole(readers.read_squad(path, require_answers=need)),
    "tagged": lambda path, task, need=True: ner.iter_tagged(path, task.scheme),
    "spans_jsonl": lambda path, task, need=True: ner.iter_spans_jsonl(path),
}


def _whole(read):
    examples, report = read
    return iter(examples), report


def _listed(stream):
    def read(path, task, need=True):
        examples, report = stream(path, task, need)
        return finish(list(examples), report)

    return read


# The same as lists: reader(path, task, need) -> (examples, report). ``tagged`` reads its file
# once here (the stream reads it twice to find the scheme without keeping the sentences).
READERS = {fmt: _listed(stream) for fmt, stream in STREAMS.items()}
READERS["tagged"] = lambda path, task, need=True: ner.read_tagged(path, task.scheme)
FORMATS = {
    "classification": (*TABLE_FORMATS, "sentence_tsv"),
    "pair": (*TABLE_FORMATS, "pair_tsv", "pair_jsonl"),
    "mrc": ("squad",),
    "ner": ("tagged", "spans_jsonl"),
}


# ------------------------------------------------------------------------------ reading


def check_task(task) -> None:
    """Fails with one line naming the key when a path is missing or the keys do not fit."""
    if task.kind not in KINDS:
        raise ValueError(f"config.task.kind={task.kind!r}; expected one of {', '.join(KINDS)}")
    if task.format not in FORMATS[task.kind]:
        raise ValueError(
            f"config.task.format={task.format!r} cannot feed kind {task.kind!r} "
            f"(use {' or '.join(FORMATS[task.kind])})"
        )
    if (task.text_fields or task.label_field) and task.format not in TABLE_FORMATS:
        raise ValueError(
            f"config.task.text_fields/label_field: format {task.format!r} has fixed fields "
            f"(they apply to {', '.join(TABLE_FORMATS)})"
        )
    if not 0.0 <= task.holdout < 1.0:
        raise ValueError(f"config.task.holdout={task.holdout} must be in [0, 1)")
    if not task.train_file:
        raise ValueError("config.task.train_file is empty: pass --config.task.train_file=PATH")
    if task.holdout == 0 and not task.dev_file:
        raise ValueError(
            "config.task.dev_file is empty: pass --config.task.dev_file=PATH (or "
            "--config.task.holdout=0.2 to evaluate on the last 20% of the training file)"
        )
    if task.dev_file and task.holdout > 0:
        raise ValueError("set one of config.task.dev_file and config.task.holdout, not both")


def read_file(task, path: str, require_label: bool = True):
    """``(examples, report)`` of one file through the reader ``task.format`` names; the report
    (every bad record with file and line) is printed, once. A table of which no record could
    be read fails with what the file looks like and the flags that would read it."""
    _check_exists(task, path)
    examples, report = READERS[task.format](path, task, require_label)
    print(report.summary(), flush=True)
    if not examples and report.issues and task.kind in ("classification", "pair"):
        raise no_records(task, path, report)
    return examples, report


def stream_file(task, path: str, require_label: bool = True):
    """``(examples, report)`` of one file as its records are read (:data:`STREAMS`): memory
    stays bounded whatever the file's size. The report is complete once the examples are;
    printing it is the caller's (once, at the end)."""
    _check_exists(task, path)
    return STREAMS[task.format](path, task, require_label)


def no_records(task, path: str, report) -> ValueError:
    """The error for a file that gave no record: what was found, and what would read it."""
    counts = ", ".join(f"{kind}={n}" for kind, n in sorted(report.counts.items()))
    found = f" ({counts})" if counts else " (it holds none)"
    if os.path.isfile(path) and not os.path.getsize(path):
        hint = "the file is empty: give one with records"
    elif task.kind in ("classification", "pair"):
        hint = f"the file looks like: {sniff.describe(path, task.kind)}"
    else:
        hint = f"kind {task.kind} reads {_FORMS[task.kind]}: give the format that fits"
    return ValueError(f"{path}: no record could be read as format {task.format}{found}; {hint}")


_FORMS = {
    "mrc": "format squad (SQuAD v1 JSON: data, paragraphs, qas)",
    "ner": "format tagged (char<TAB>tag lines, a blank line after each sentence) or "
    'spans_jsonl (JSON lines with a "text")',
}


def _check_exists(task, path: str) -> None:
    folder = task.format == "datasets"  # save_to_disk writes a folder
    if not (os.path.isdir if folder else os.path.isfile)(path):
        raise FileNotFoundError(f"{path}: no such {'folder' if folder else 'file'}")


def read_task(task):
    """``(train_examples, eval_examples, reports)``: the two files, or one file split by
    ``task.holdout`` (see :func:`holdout_split`). An empty ``task.labels`` is set here to the
    labels of the training file (see :func:`resolve_labels`), so ``task`` leaves with them."""
    check_task(task)
    train, report = read_file(task, task.train_file)
    resolve_labels(task, train)
    if task.holdout == 0:
        evaluation, dev_report = read_file(task, task.dev_file)
        return train, evaluation, [report, dev_report]
    train, evaluation = holdout_split(train, task.holdout, by_passage=task.kind == "mrc")
    return train, evaluation, [report]


def resolve_labels(task, train: Sequence) -> None:
    """Classification and pair: an empty ``task.labels`` becomes the training file's labels
    (numbers in numeric order, else sorted); the set and its counts are printed either way,
    and an evaluation file's labels outside it are reported as ``unknown_label``. NER: the
    ``O``/``B-``/``I-`` tags of the training file's entity types (``ner.labels``)."""
    if task.kind == "ner" and not task.labels:
        task.labels = ner.labels(train)
        print(f"zhlm-finetune: tags from {task.train_file}: {', '.join(task.labels)}", flush=True)
    if task.kind not in ("classification", "pair"):
        return
    counts = collections.Counter(e.label for e in train)
    given = bool(task.labels)
    if not given:
        found = sorted(counts, key=_label_order)
        if len(train) >= 10 and len(found) > len(train) / 2:
            raise ValueError(
                f"{task.train_file}: {len(found)} distinct labels in {len(train)} records: is "
                "the label column where it was looked for? (config.task.labels takes them "
                f"as they are) The file looks like: {sniff.describe(task.train_file, task.kind)}"
            )
        task.labels = tuple(found)
    shown = ", ".join(f"{label} ({counts[label]})" for label in task.labels)
    how = "config.task.labels" if given else "inferred, in this order"
    print(f"zhlm-finetune: labels of {task.train_file} ({how}): {shown}", flush=True)


def _label_order(label: str):
    return (0, int(label), "") if label.lstrip("-").isdigit() else (1, 0, label)


def holdout_split(examples: Sequence, holdout: float, by_passage: bool = False):
    """The first ``1 - holdout`` of the records (or of the passages, in file order) train, the
    rest evaluate. Nothing is shuffled: the split is the same on every machine."""
    keys = [_passage(e) for e in examples] if by_passage else list(range(len(examples)))
    groups = list(dict.fromkeys(keys))
    cut = int(round(len(groups) * (1 - holdout)))
    train_keys = set(groups[:cut])
    train = [e for e, k in zip(examples, keys, strict=True) if k in train_keys]
    rest = [e for e, k in zip(examples, keys, strict=True) if k not in train_keys]
    return train, rest


def _passage(example: readers.MrcExample):
    return (example.title, example.context_id, example.context)


def squad_json(examples: Sequence[readers.MrcExample]) -> dict:
    """SQuAD v1 layout of ``examples`` (one paragraph per passage), the dataset file that
    ``zhlm-cmrc-eval`` scores a predictions file against."""
    paragraphs: dict = {}
    for e in examples:
        para = paragraphs.setdefault(_passage(e), {"id": e.context_id, "context": e.context})
        answers = [
            {"text": a.text, "answer_start": -1 if a.start is None else a.start} for a in e.answers
        ]
        para.setdefault("qas", []).append({"id": e.qid, "question": e.question, "answers": answers})
    data = [{"title": key[0], "paragraphs": [para]} for key, para in paragraphs.items()]
    return {"version": "v1.0", "data": data}


def load_tokenizer(task, loaded=None) -> WordPiece:
    """``task.vocab``, else the vocab the init was trained with (``loaded``, a
    ``zhlm.train.checkpoint.Loaded``: its folder's ``vocab.txt`` or its config's), else
    Google's."""
    vocab = task.vocab
    if not vocab and loaded is not None:
        if loaded.tokenizer != "wordpiece":
            raise ValueError(
                f"{loaded.description} was pretrained with a {loaded.tokenizer} tokenizer; "
                "fine-tuning reads WordPiece vocabularies (set config.task.vocab to a vocab.txt)"
            )
        vocab = loaded.vocab
    return WordPiece(vocab or default_vocab(), task.lower_case)


def special_ids(tokenizer) -> tuple[int, int, int]:
    """``([CLS], [SEP], [PAD])`` ids of the vocab."""
    return tuple(tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))


# ------------------------------------------------------------------- classification features


def truncate_pair(len_a: int, len_b: int, max_tokens: int) -> tuple[int, int]:
    """Lengths after BERT's ``_truncate_seq_pair``: drop the last token of the longer text (of
    ``b`` on a tie) until both fit in ``max_tokens``."""
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def classification_features(examples, tokenizer, labels: Sequence[str], max_seq_length: int):
    """``input_ids, token_type_ids, attention_mask`` [N,S] and ``label`` [N] for sentence or
    pair examples (a pair has ``text_b``); label ids follow the order of ``labels``."""
    cls, sep, pad = special_ids(tokenizer)
    pair = bool(examples) and hasattr(examples[0], "text_b")
    encoded_a = tokenizer.encode_batch([e.text_a if pair else e.text for e in examples])
    encoded_b = tokenizer.encode_batch([e.text_b for e in examples]) if pair else None
    n = len(examples)
    ids = np.full((n, max_seq_length), pad, np.int32)
    types = np.zeros((n, max_seq_length), np.int32)
    mask = np.zeros((n, max_seq_length), np.int32)
    label_index = {label: i for i, label in enumerate(labels)}
    for row, a in enumerate(encoded_a):
        if pair:
            b = encoded_b[row].ids
            len_a, len_b = truncate_pair(len(a.ids), len(b), max_seq_length - 3)
            tokens = [cls, *a.ids[:len_a], sep, *b[:len_b], sep]
            types[row, len_a + 2 : len(tokens)] = 1
        else:
            tokens = [cls, *a.ids[: max_seq_length - 2], sep]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    # No label (inputs to predict): -1, which no loss or metric ever reads.
    label = np.array([-1 if e.label is None else label_index[e.label] for e in examples], np.int32)
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask, label=label)


# Windows over a long token sequence, shared by MRC (zhlm.finetune.mrc) and NER (ner_features).


def doc_windows(num_tokens: int, window: int, stride: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each window: ``stride`` apart, the last ending at the last token."""
    spans, start = [], 0
    while True:
        length = min(window, num_tokens - start)
        spans.append((start, length))
        if start + length >= num_tokens:
            return spans
        start += min(length, stride)


def max_context_window(spans: Sequence[tuple[int, int]], num_tokens: int) -> np.ndarray:
    """For each token, the window where ``min(left, right context) + 0.01 * length`` is highest
    (the first of equals), as BERT's ``_check_is_max_context``."""
    best = np.zeros(num_tokens, np.int32)
    best_score = np.full(num_tokens, -np.inf)
    for w, (start, length) in enumerate(spans):
        p = np.arange(start, start + length)
        score = np.minimum(p - start, start + length - 1 - p) + 0.01 * length
        better = score > best_score[p]
        best[p[better]], best_score[p[better]] = w, score[better]
    return best


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, -1) == labels)) if len(labels) else 0.0


def write_json(path, value) -> None:
    """``value`` as UTF-8 JSON at ``path`` (local or ``gs://``, see ``zhlm.paths``)."""
    text = json.dumps(value, ensure_ascii=False, indent=1)
    paths.resolve(path).write_text(text, encoding="utf-8")
