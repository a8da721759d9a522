"""Reading a fine-tuning task's files: checks of the task keys, one file through its kind's
reader with the report printed, the two files (or one split by ``task.holdout``), the tokenizer.

What is read, and how examples become arrays, is the task kind's (:mod:`zhlm.finetune.kinds`,
resolved once by the caller and passed in);
reading also settles what the training file decides (an empty ``task.labels`` becomes its
labels, written back into ``task``, so the head, the metrics and the saved config agree).

Training reads a file whole (:func:`read_file`); prediction streams it (:func:`stream_file`), so
that a table or tagged file of any size fits in the same memory (a JSON document is parsed whole). A
file's report is printed once: by read_file, or by zhlm-predict after the last record.

Why the split helper: LCQMC and CMRC 2018 have no offline training file, so a config may hold
out a fraction of one file: records drawn at random within each label, or whole passages for
MRC so that no passage is in both halves. The draw is seeded, so every run sees the same halves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.errors import NotFound, UserError
from zhlm.finetune.readers import tables
from zhlm.finetune.readers.report import MALFORMED_LINE

# ------------------------------------------------------------------------------ reading


def check_task(kind, task) -> None:
    """Fails with one line naming the key when a path is missing or the keys do not fit."""
    if task.format not in kind.formats:
        raise UserError(
            f"config.task.format={task.format!r} cannot feed kind {task.kind!r} "
            f"(use {' or '.join(kind.formats)})"
        )
    if (task.text_fields or task.label_field) and task.format not in tables.FORMATS:
        raise UserError(
            f"config.task.text_fields/label_field: format {task.format!r} has fixed fields "
            f"(they apply to {', '.join(tables.FORMATS)})"
        )
    if any(not isinstance(label, str) for label in task.labels):
        raise UserError(
            f"config.task.labels={tuple(task.labels)}: labels are strings, as the file writes "
            f'them: --config.task.labels="{_spelled(task.labels)}"'
        )
    if task.label_names and not kind.reader.takes_label_names:
        raise UserError(
            f"config.task.label_names={task.label_names}: kind {task.kind} has no label ids to "
            "name (classification and pair tables do): leave it empty"
        )
    if not 0.0 <= task.holdout < 1.0:
        raise UserError(f"config.task.holdout={task.holdout} must be in [0, 1)")
    if not task.train_file:
        raise UserError("config.task.train_file is empty: pass --config.task.train_file=PATH")
    if task.holdout == 0 and not task.dev_file:
        raise UserError(
            "config.task.dev_file is empty: pass --config.task.dev_file=PATH (or "
            "--config.task.holdout=0.2 to evaluate on 20% of the training file, drawn at random)"
        )
    if task.dev_file and task.holdout > 0:
        raise UserError("set one of config.task.dev_file and config.task.holdout, not both")


def _spelled(labels) -> str:
    """``labels`` as a tuple of strings written for the command line: ``('0','1')``."""
    items = ",".join(f"'{label}'" for label in labels)
    return f"({items},)" if len(labels) == 1 else f"({items})"


def read_file(kind, task, path: str, require_label: bool = True):
    """``(examples, report)`` of one file through the kind's reader; the report (every bad
    record with file and line) is printed, once. A file of which no record could be read, or
    most of whose records could not (:func:`check_readable`), fails with what the file looks
    like and the flags that would read it."""
    examples, report = stream_file(kind, task, path, require_label)
    examples = list(examples)
    print(report.summary(), flush=True)
    if not examples:
        raise no_records(kind, task, path, report)
    check_readable(kind, task, path, report)
    return examples, report


def check_readable(kind, task, path: str, report) -> None:
    """Refuses a file more of whose records are unreadable (``malformed_line``: not UTF-8,
    another number of fields, not JSON) than read, so far: such a file is another format, or
    not text (a binary file yields a few lines that happen to decode), and what it gave would
    train or predict on garbage. Training asks once the file is read (:func:`read_file`);
    prediction before each chunk is written (``zhlm.finetune.predict``), so such a file gets
    no prediction past the point where it was found out, none at all when it is so from its
    start."""
    unreadable = sum(issue.dropped and issue.kind == MALFORMED_LINE for issue in report.issues)
    if unreadable <= report.records:
        return
    raise UserError(
        f"{path}: mostly unreadable as format {task.format} ({unreadable} records unreadable, "
        f"{report.records} read): {kind.reader.describe(path, task)}"
    )


def stream_file(kind, task, path: str, require_label: bool = True):
    """``(examples, report)`` of one file as its records are read (the reader's ``read``):
    memory stays bounded whatever the file's size. The report is complete once the examples
    are; printing it is the caller's (once, at the end)."""
    _check_exists(task, path)
    return kind.reader.read(path, task, require_label)


def no_records(kind, task, path: str, report) -> UserError:
    """The error for a file that gave no record: what was found, and what would read it."""
    if os.path.isfile(path) and not os.path.getsize(path):
        return UserError(f"{path} is empty (0 bytes): give a file with records")
    if not report.issues:
        return UserError(f"{path} holds no records (a header alone?): give a file with records")
    counts = ", ".join(f"{issue}={n}" for issue, n in sorted(report.counts.items()))
    hint = kind.reader.describe(path, task)
    return UserError(f"{path}: no record could be read as format {task.format} ({counts}); {hint}")


def _check_exists(task, path: str) -> None:
    folder = task.format == "datasets"  # save_to_disk writes a folder
    if folder and not os.path.isdir(path):
        raise NotFound(f"{path}: no such folder (format datasets reads a save_to_disk folder)")
    if not folder and os.path.isdir(path):
        raise UserError(f"{path} is a folder: give the file in it to read")
    if not folder and not os.path.isfile(path):
        raise NotFound(f"{path}: no such file")


def read_task(kind, task):
    """``(train_examples, eval_examples, reports)``: the two files, or one file split by
    ``task.holdout`` (see :func:`holdout_split`). What the training file settles (an empty
    ``task.labels``: its labels) is written into ``task`` here, so ``task`` leaves with it."""
    check_task(kind, task)
    train, reports = read_files(kind, task, task.train_file)
    kind.settle(task, train)
    if task.holdout == 0:
        evaluation, dev_reports = read_files(kind, task, task.dev_file)
        reports += dev_reports
    else:
        train, evaluation = holdout_split(train, task.holdout, kind.holdout)
    return train, evaluation, reports


def read_files(kind, task, paths_: str):
    """``(examples, reports)`` of the comma-separated files ``paths_``, read in that order as
    one set (a dataset shipped in parts, e.g. C3's dialogue and mixed-genre halves)."""
    examples, reports = [], []
    for path in paths_.split(","):
        more, report = read_file(kind, task, path.strip())
        examples += more
        reports.append(report)
    return examples, reports


HOLDOUT_SEED = 0  # the holdout's draw: fixed, so every run and machine evaluates the same rows


def holdout_split(examples: Sequence, holdout: float, split_key: Callable | None = None):
    """``(train, evaluation)``: a seeded random ``holdout`` share of the groups ``split_key``
    gives (``(group, stratum)`` of an example, e.g. MRC passages; None or a group of None: each
    record) evaluates, the rest trains, each side in file order. Drawn within each stratum (a
    label) separately, so both sides keep the file's label shares; a file sorted by label loses
    no class to either side, as taking its tail would. The draw is :data:`HOLDOUT_SEED`'s: the
    same split on every run and machine."""
    keyed = [(None, None) if split_key is None else split_key(e) for e in examples]
    keys = [i if group is None else group for i, (group, _) in enumerate(keyed)]
    strata: dict = {}  # stratum -> its groups in file order (a group's first record decides)
    seen = set()
    for k, (_, stratum) in zip(keys, keyed, strict=True):
        if k not in seen:
            seen.add(k)
            strata.setdefault(stratum, []).append(k)
    rng = np.random.RandomState(HOLDOUT_SEED)
    held = set()
    for name in sorted(strata, key=str):
        groups = list(strata[name])
        count = int(round(len(groups) * holdout))
        held.update(groups[i] for i in rng.permutation(len(groups))[:count])
    train = [e for e, k in zip(examples, keys, strict=True) if k not in held]
    rest = [e for e, k in zip(examples, keys, strict=True) if k in held]
    return train, rest


def load_tokenizer(task, loaded=None) -> WordPiece:
    """``task.vocab``, else the vocab the init was trained with (``loaded``, a
    ``zhlm.train.checkpoint.Loaded``: its folder's ``vocab.txt`` or its config's), else
    Google's."""
    vocab = task.vocab
    if not vocab and loaded is not None:
        if loaded.tokenizer != "wordpiece":
            raise UserError(
                f"{loaded.description} was pretrained with a {loaded.tokenizer} tokenizer; "
                "fine-tuning reads WordPiece vocabularies (set config.task.vocab to a vocab.txt)"
            )
        vocab = loaded.vocab
    return WordPiece(vocab or default_vocab(), task.lower_case)
