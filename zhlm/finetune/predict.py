"""``predict(workdir, input, output)``: a fine-tuned model's predictions for a file, as JSON lines
written while the file is read.

Why streamed: inputs to predict can be far larger than a dev set, and a long run may be stopped.
So the input is read, predicted and written :data:`CHUNK` records at a time
(:func:`zhlm.finetune.task_files.stream_file` → :meth:`TaskModel.predict` → the output), each chunk
appended and flushed to disk (``fsync``) before the next is read: memory is bounded by the chunk
whatever the file's size, and a stopped run leaves every finished record on disk. Before a
chunk is written the input so far must be mostly readable, training's rule
(:func:`~zhlm.finetune.task_files.check_readable`): a binary file or one of another format is
refused before its first prediction, not answered with predictions of the few lines that
happened to decode. The records
(:mod:`zhlm.finetune.task_model`) are one line per input record, in input order, each with the
record's ``id`` and its inputs; this module knows nothing of task kinds.

The input's format is ``--format`` if given, else the one its extension names (:data:`EXTENSIONS`)
among those the task kind reads, else the run's: ``reviews.txt`` is plain text, a text a line (a
pair: two texts split by a tab), for a model trained on TSV; a ``.txt`` stays ``tagged`` for an
NER model trained on tagged files (``--format=text`` reads plain sentences).

Run again with the same output, a stopped run continues: the complete lines already there are
kept (a last line cut short by the stop is dropped), that many input records are skipped and
the rest appended, with "continuing after N records already in OUTPUT". The output must be this
input's: the ids of its first and last lines must be those of the input's records at the same
places, else it is refused (never overwritten) with what differs. Ids name a record's file and
line unless the input has an ``id`` field, so this tells another file from this one, not an
edited copy of this one under the same name.

One writer per output: two runs appending to one file would interleave their lines, so the
output is locked while it is written (``OUTPUT.lock`` beside it,
:func:`zhlm.workdir_lock.hold_output`) and a second run stops at once naming the first. A
write that fails (a full disk) or is interrupted is cut back to the last complete record; a
failure stops the run with one line saying what the output keeps and that the same command
continues after it.

Cloud outputs (``gs://``): an object cannot be appended to, so the lines go to a local
temporary file and are uploaded whole when the last is written; a stopped run leaves nothing
there to continue from, and an existing object is refused. To continue a stopped run of a large
file, write it locally and copy it when done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import os
import shutil
import sys
import tempfile
import time

from zhlm import paths, workdir_lock
from zhlm.compilation_cache import CompileCount
from zhlm.errors import UserError
from zhlm.finetune import task_files
from zhlm.finetune.task_model import TaskModel

CHUNK = 1024  # input records read, predicted and written at a time
# The formats a file extension may hold, the likelier first; the kind's formats choose.
EXTENSIONS = {
    ".txt": ("text", "tagged"),
    ".tsv": ("tsv",),
    ".csv": ("csv",),
    ".jsonl": ("jsonl", "spans_jsonl"),
    ".json": ("json", "squad"),
    ".parquet": ("parquet",),
}


def predict(
    source: str,
    input_file: str,
    output: str,
    fmt: str = "",
    text_fields=(),
    max_seq_length: int = 0,
    batch_size: int = 0,
    quiet: bool = False,
    pack: bool = True,
) -> int:
    """Writes predictions for ``input_file`` to ``output`` (JSON lines) with the model of
    ``source`` (a fine-tuning workdir, or its ``best/``), reading it as ``fmt`` (empty: see
    :func:`input_format`), each input cut to ``max_seq_length`` tokens and computed
    ``batch_size`` at a time (0: the run's), several a row unless ``pack`` is False
    (``TaskModel.load``); returns how many the output holds, one per input record. The output
    is locked first, so a second run on it stops at once, before loading its model. Says the
    length and batch it uses and why, and ends with :func:`summary`; on stdout, or stderr when
    ``quiet``."""
    with workdir_lock.hold_output(output, "zhlm-predict"), CompileCount() as compiles:
        model = TaskModel.load(
            source,
            text_fields=text_fields,
            max_seq_length=max_seq_length,
            batch_size=batch_size,
            pack=pack,
        )
        model.task.format = input_format(model.kind, model.task, input_file, fmt)
        _say(f"zhlm-predict: {model.settings}", quiet)
        began = time.perf_counter()
        count = _predict_file(model, input_file, output, quiet=quiet)
        _say(summary(model.tally, time.perf_counter() - began, compiles), quiet)
        return count


def summary(tally, seconds: float, compiles: CompileCount) -> str:
    """The line that ends a prediction: records, examples per second (compiling included),
    what was compiled, the share of the computed token positions that held real tokens and,
    packed, the rows a batch (``TaskModel.tally``)."""
    return f"zhlm-predict: {tally.describe('records', seconds, compiles)}"


def _say(text: str, quiet: bool = False) -> None:
    """A line for the user: on stdout, or on stderr when ``quiet`` (stdout left to pipes)."""
    print(text, file=sys.stderr if quiet else sys.stdout, flush=True)


def input_format(kind, task, path: str, fmt: str = "") -> str:
    """``fmt`` if given (one the kind reads), else the format of ``path``'s extension among the
    kind's (the run's own where it is one of them), else the run's."""
    formats = kind.formats
    if fmt:
        if fmt not in formats:
            raise UserError(f"--format={fmt}: kind {task.kind} reads {', '.join(formats)}")
        return fmt
    extension = os.path.splitext(os.fspath(path).lower())[1]
    fits = [f for f in EXTENSIONS.get(extension, ()) if f in formats]
    return task.format if task.format in fits or not fits else fits[0]


def predict_file(
    model: TaskModel, input_file: str, output: str, chunk: int = CHUNK, quiet: bool = False
) -> int:
    """``model``'s records for every record of ``input_file``, appended to ``output`` a chunk
    at a time after those a stopped run left there (see the module docstring); returns how
    many the output holds. An input that gives no record is an error. One writer at a time:
    the output is locked (:func:`zhlm.workdir_lock.hold_output`) while it is written."""
    with workdir_lock.hold_output(output, "zhlm-predict"):
        return _predict_file(model, input_file, output, chunk, quiet)


def _predict_file(
    model: TaskModel, input_file: str, output: str, chunk: int = CHUNK, quiet: bool = False
) -> int:
    from tqdm import tqdm

    examples, report = task_files.stream_file(model.kind, model.task, input_file, False)
    output = output if paths.is_remote(output) else os.fspath(paths.resolve(output))
    done = _done(output)
    _skip(examples, done, input_file, output)
    if done.partial:
        try:
            os.truncate(output, done.size)
        except OSError as e:
            raise _cannot_write(output, e, done.count) from e
    if done.count:
        cut = " (its unfinished last line dropped)" if done.partial else ""
        _say(f"zhlm-predict: continuing after {done.count} records already in {output}{cut}", quiet)
    written = done.count
    with _Appender(output, done.count) as out, tqdm(unit="input", desc="zhlm-predict") as bar:
        for examples_chunk in _chunks(examples, chunk):
            _check_readable(model, input_file, report, quiet)
            records = model.predict(examples_chunk)
            out.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
            written += len(records)
            bar.update(len(records))
    _say(report.summary(), quiet)
    if not written:
        raise task_files.no_records(model.kind, model.task, input_file, report)
    return written


def _check_readable(model: TaskModel, input_file: str, report, quiet: bool = False) -> None:
    """Training's rule for the input read so far (``task_files.check_readable``), asked before
    each chunk is written: an input that is mostly unreadable from its start (another format,
    a binary file) is refused before any prediction is written; one that turns so later stops
    there, the predictions of its readable part kept, as a stopped run's are."""
    try:
        task_files.check_readable(model.kind, model.task, input_file, report)
    except UserError:
        _say(report.summary(), quiet)
        raise


def _chunks(iterable, size: int):
    iterator = iter(iterable)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


# ----------------------------------------------------------------------- continuing a run


@dataclasses.dataclass(frozen=True)
class _Done:
    """What an earlier run left in the output: its complete lines."""

    count: int = 0
    size: int = 0  # bytes of the complete lines
    partial: bool = False  # a last line without its newline follows them
    first: str = ""  # the ids of the first and last complete line
    last: str = ""


def _done(output: str) -> _Done:
    """The complete lines of ``output``, read a line at a time; an empty :class:`_Done` when
    there is none. A cloud object that exists is refused: it cannot be continued."""
    if paths.is_remote(output):
        if paths.resolve(output).exists():
            raise UserError(
                f"{output} exists and a cloud object cannot be continued: remove it or choose "
                "another --output (a local output continues a stopped run)"
            )
        return _Done()
    if not os.path.exists(output):
        return _Done()
    if os.path.isdir(output):
        raise UserError(f"{output} is a folder: give --output a file name (one in it, say)")
    count = size = 0
    first = last = b""
    partial = False
    with open(output, "rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                partial = True
                break
            count, size = count + 1, size + len(line)
            first, last = first or line, line
    if partial and not count:
        raise UserError(
            f"{output} holds no complete zhlm-predict record to continue from: remove it or "
            "choose another --output"
        )
    return _Done(count, size, partial, _id(first, output, 1), _id(last, output, count))


def _id(line: bytes, output: str, number: int) -> str:
    if not line:
        return ""
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict) or "id" not in record:
        raise UserError(
            f"{output}:{number} is not a zhlm-predict record (a JSON object with an id): remove "
            "the file or choose another --output"
        )
    return str(record["id"])


def _skip(examples, done: _Done, input_file: str, output: str) -> None:
    """Reads past the ``done.count`` input records the output already has, checking that its
    first and last have their ids."""
    seen = 0
    for seen, example in enumerate(itertools.islice(examples, done.count), start=1):
        expected = done.first if seen == 1 else done.last if seen == done.count else None
        if expected is not None and example.guid != expected:
            raise UserError(
                f"{output} is not the output of {input_file}: its record {seen} has id "
                f"{expected!r}, the input's {example.guid!r}; remove it or choose another --output"
            )
    if seen < done.count:
        raise UserError(
            f"{output} has {done.count} records, {input_file} only {seen}: it is not this "
            "input's output; remove it or choose another --output"
        )


def _cannot_write(output: str, error: OSError, records: int) -> UserError:
    """The one-line refusal for an output that cannot be written: a full disk says what is kept
    and that the same command continues after it."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return UserError(
            f"no space left to write {output} ({error.strerror}): it keeps its {records} "
            "complete records; free space and run the same command again to continue after them"
        )
    return UserError(
        f"cannot write {output} ({error.strerror or error}): choose a writable --output"
    )


class _Appender:
    """Text appended to the output, each write on disk before the next (``os.write`` +
    ``fsync``, unbuffered: a failed write leaves nothing behind to be flushed later). A write
    that fails or is interrupted is cut off the file, so it ends with the last complete record;
    a failure stops the run in one line (:func:`_cannot_write`). A cloud output is written to a
    local temporary file, uploaded when closed without an error."""

    def __init__(self, output: str, records: int):
        self.output, self.records, self.file = output, records, None
        self.remote = paths.is_remote(output)

    def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8"))
        try:
            if self.file is None:  # opened at the first record: no record, no file
                self.file = tempfile.TemporaryFile() if self.remote else self._local()
            fd = self.file.fileno()
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                while data:
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            except BaseException:  # failed or interrupted (Ctrl-C): no part of a record stays
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        except OSError as e:
            raise _cannot_write(self.output, e, self.records) from e
        self.records += text.count("\n")

    def _local(self):
        os.makedirs(os.path.dirname(self.output), exist_ok=True)
        return open(self.output, "ab", buffering=0)

    def __enter__(self):
        return self

    def __exit__(self, error_type, error, traceback):
        if self.file is None:
            return
        if self.remote and error_type is None:
            self.file.seek(0)
            with paths.resolve(self.output).open("wb") as remote:
                shutil.copyfileobj(self.file, remote)
        self.file.close()
