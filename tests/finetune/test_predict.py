"""zhlm-predict on files: records in input order, one per input record, written a chunk at a
time; a stopped run continues to the same bytes; an output of another input is refused; an
input that gives no record, or is mostly unreadable, is an error.

The models are random (saved the way zhlm-finetune saves ``best/``): what is under test is the
file front end, not accuracy. Small chunks make a few hundred records several chunks.
"""

import inspect
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from etils import epath
from helpers import DATA, LONG_REVIEWS, ROOT, binary_file, binary_lines, cut_to_tokens

from zhlm import workdir_lock
from zhlm.errors import UserError
from zhlm.finetune import task_files
from zhlm.finetune.predict import predict, predict_file
from zhlm.finetune.task_model import TaskModel

CHUNK = 64
REVIEWS = os.path.join(DATA, "chnsenticorp", "dev.tsv")


@pytest.fixture(scope="module")
def classifier(workdirs):
    return TaskModel.load(workdirs["classification"])


def _lines(path, n, header=True):
    """The first ``n`` records of ChnSentiCorp dev (and its header) as a file at ``path``."""
    with open(REVIEWS, encoding="utf-8") as f:
        rows = f.read().splitlines()
    path.write_text("\n".join(rows[: n + 1] if header else rows[1 : n + 1]) + "\n")
    return str(path)


def _ids(path):
    return [json.loads(line)["id"] for line in open(path, encoding="utf-8")]


@pytest.mark.slow
def test_records_follow_the_input_one_line_each_for_every_kind(workdirs, classifier, tmp_path):
    reviews = _lines(tmp_path / "reviews.tsv", 200)
    out = tmp_path / "reviews.jsonl"
    assert predict_file(classifier, reviews, str(out), chunk=CHUNK) == 200
    examples, _ = task_files.read_file(
        classifier.kind, classifier.task, reviews, require_label=False
    )
    assert _ids(out) == [e.guid for e in examples] == [f"reviews.tsv:{i}" for i in range(2, 202)]
    # NER: sentences of several lines each; MRC: one record per question, not per passage.
    ner_input = tmp_path / "msra.txt"
    with open(os.path.join(DATA, "msra_ner", "dev.txt"), encoding="utf-8") as f:
        ner_input.write_text("\n\n".join(f.read().split("\n\n")[:150]) + "\n")
    cmrc = tmp_path / "cmrc.json"
    with open(os.path.join(DATA, "cmrc2018", "cmrc2018_trial.json"), encoding="utf-8") as f:
        squad = json.load(f)
    squad["data"] = squad["data"][:6]
    cmrc.write_text(json.dumps(squad, ensure_ascii=False))
    for kind, path, chunk in (("ner", ner_input, CHUNK), ("mrc", cmrc, 10)):
        model = TaskModel.load(workdirs[kind])
        out = tmp_path / f"{kind}.jsonl"
        n = predict_file(model, str(path), str(out), chunk=chunk)
        examples, _ = task_files.read_file(model.kind, model.task, str(path), require_label=False)
        assert n == len(examples) > chunk and _ids(out) == [e.guid for e in examples], kind


def test_a_stopped_run_continues_to_the_same_bytes(classifier, tmp_path, capsys):
    reviews = _lines(tmp_path / "reviews.tsv", 300)
    whole = tmp_path / "whole.jsonl"
    assert predict_file(classifier, reviews, str(whole), chunk=CHUNK) == 300
    expected = whole.read_bytes()
    starts = [i + 1 for i, byte in enumerate(expected) if byte == ord("\n")]
    out = tmp_path / "out.jsonl"
    # Stopped inside line 151 (its first 10 bytes on disk), and between two lines.
    for cut, kept, note in ((starts[149] + 10, 150, " (its unfinished"), (starts[99], 100, "\n")):
        out.write_bytes(expected[:cut])
        capsys.readouterr()
        assert predict_file(classifier, reviews, str(out), chunk=CHUNK) == 300
        assert out.read_bytes() == expected
        said = capsys.readouterr().out
        assert f"continuing after {kept} records already in {out}{note}" in said
    # A finished output: nothing to add, nothing changed.
    assert predict_file(classifier, reviews, str(out), chunk=CHUNK) == 300
    assert out.read_bytes() == expected


def test_an_output_of_another_input_is_refused_and_left_as_it_is(classifier, tmp_path):
    reviews = _lines(tmp_path / "reviews.tsv", 100)
    other = _lines(tmp_path / "other.tsv", 100)
    out = tmp_path / "out.jsonl"
    predict_file(classifier, other, str(out), chunk=CHUNK)
    before = out.read_bytes()
    with pytest.raises(ValueError, match=r"is not the output of .*reviews.tsv: its record 1 has"):
        predict_file(classifier, reviews, str(out), chunk=CHUNK)
    # The same name, fewer records: the output cannot be this input's.
    short = _lines(tmp_path / "other.tsv", 40)
    with pytest.raises(ValueError, match="has 100 records, .*other.tsv only 40: .*remove it"):
        predict_file(classifier, short, str(out), chunk=CHUNK)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("my own notes\n")
    with pytest.raises(ValueError, match="notes.jsonl:1 is not a zhlm-predict record"):
        predict_file(classifier, reviews, str(notes), chunk=CHUNK)
    assert out.read_bytes() == before and notes.read_text() == "my own notes\n"


def test_a_cloud_output_is_uploaded_whole_and_never_continued(classifier, tmp_path, gcs):
    reviews = _lines(tmp_path / "reviews.tsv", 100)
    local = tmp_path / "local.jsonl"
    predict_file(classifier, reviews, str(local), chunk=CHUNK)
    assert predict_file(classifier, reviews, "gs://bucket/out.jsonl", chunk=CHUNK) == 100
    assert epath.Path("gs://bucket/out.jsonl").read_bytes() == local.read_bytes()
    with pytest.raises(ValueError, match="cloud object cannot be continued: remove it"):
        predict_file(classifier, reviews, "gs://bucket/out.jsonl", chunk=CHUNK)


def _command(workdir, path, out):
    """zhlm-predict's exit status and last line of stderr for ``path``."""
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={workdir}"]
    cmd += [f"--input={path}", f"--output={out}"]
    env = dict(os.environ, PYTHONPATH=ROOT)  # this checkout's zhlm, whatever is installed
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return done.returncode, done.stderr.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_input_that_gives_no_record_exits_non_zero(workdirs, classifier, tmp_path):
    """Through the command, naming its own flags: a NER model given plain sentences in a .txt
    (read as its run's tagged files: every line malformed), and a classifier given a CSV
    named .tsv. An empty file, in process."""
    plain = tmp_path / "plain.txt"
    plain.write_text("今天北京下雨。\n明天上海晴。\n")
    out = tmp_path / "out.jsonl"
    status, last = _command(workdirs["ner"], plain, out)
    assert status != 0
    assert last.startswith(f"zhlm-predict: {plain}: no record could be read as format tagged")
    assert "(malformed_line=1)" in last  # one sentence of two lines
    assert "or text (a sentence a line" in last and last.endswith("fits, --format=NAME")
    assert not out.exists()
    commas = tmp_path / "reviews.tsv"
    commas.write_text("".join(f"{i % 2},好评{i},第{i}条\n" for i in range(8)), encoding="utf-8")
    status, last = _command(workdirs["classification"], commas, out)
    assert status != 0 and "--config" not in last
    assert last.startswith(f"zhlm-predict: {commas}: no record could be read as format tsv")
    assert last.endswith("try --format=csv --text_fields=1")
    assert not out.exists()
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty.tsv is empty \(0 bytes\): give a file with rec"):
        predict_file(classifier, str(empty), str(out))
    assert not out.exists()


def test_a_mostly_unreadable_input_is_refused_before_any_prediction(workdirs, tmp_path):
    """A 5 kB binary file whose lines but two do not decode: training's rule (more records
    unreadable than read is refused), through the command, and nothing written."""
    # The run's layout: a headerless TSV has a label last.
    path = binary_file(tmp_path / "binary.tsv", ("很好\t1", "太差\t0"))
    out = tmp_path / "out.jsonl"
    status, last = _command(workdirs["classification"], path, out)
    assert status != 0 and not out.exists()
    assert last.startswith(
        f"zhlm-predict: {path}: mostly unreadable as format tsv (41 records unreadable, 2 read): "
        "the file looks like: neither UTF-8 nor GBK text"
    ), last


def test_an_input_that_turns_unreadable_stops_before_that_chunk(classifier, tmp_path):
    """The rule is asked before each chunk is written: the chunks of the readable start are
    kept (as a stopped run's), the chunk where the input turned mostly unreadable is not
    written, and the same command stops there again."""
    reviews = _lines(tmp_path / "reviews.tsv", 100)
    path = tmp_path / "tail.tsv"
    path.write_bytes(open(reviews, "rb").read() + b"\n".join(binary_lines(300)) + b"\n")
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        with pytest.raises(ValueError, match=r"mostly unreadable as format tsv \(300 records unr"):
            predict_file(classifier, str(path), str(out), chunk=CHUNK)
        assert _ids(out) == [f"tail.tsv:{i}" for i in range(2, 2 + CHUNK)]


def test_a_table_named_txt_is_reported_line_by_line_as_plain_text(workdirs, tmp_path):
    """A .txt is plain text, one text a line: a table's lines (a label, a tab, a text) are
    reported, never a label read as part of the text."""
    table = tmp_path / "table.txt"
    table.write_text("1\t很好\n0\t太差\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"format text \(malformed_line=2\); .*tab-delim"):
        predict(workdirs["classification"], str(table), str(tmp_path / "out.jsonl"))


def test_labels_of_inputs_to_predict_are_not_checked(classifier, tmp_path):
    """A label column outside the run's labels (or '-') skips no input: predicting reads none."""
    scored = tmp_path / "scored.tsv"
    scored.write_text("label\ttext_a\n5\t很好\n-\t太差\n\t一般\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert predict_file(classifier, str(scored), str(out)) == 3
    assert [json.loads(line)["text"] for line in open(out, encoding="utf-8")] == [
        "很好",
        "太差",
        "一般",
    ]


# ------------------------------------------------------- one writer, and a disk that fills up


def _stderr_lines(stderr):
    """What zhlm-predict printed on stderr besides its progress bar's refreshes."""
    bar = re.compile(r"(\?|\d)input/s\]|^\s*$")
    return [line for line in stderr.splitlines() if not bar.search(line)]


@pytest.mark.slow
def test_a_second_writer_of_an_output_stops_at_once_naming_the_first(
    workdirs, classifier, tmp_path
):
    """Two runs appending to one output would interleave their lines (3,952 lines for 3,000
    inputs): the output is locked as a workdir is. The first writer is this process, the
    second a real zhlm-predict, and then this process again."""
    reviews = _lines(tmp_path / "reviews.tsv", 100)
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={workdirs['classification']}"]
    cmd += [f"--input={reviews}", f"--output={out}"]
    env = dict(os.environ, PYTHONPATH=ROOT)
    with workdir_lock.hold_output(str(out), "zhlm-predict"):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        with pytest.raises(workdir_lock.WorkdirLocked, match=f"output {out} is in use by"):
            predict_file(classifier, reviews, str(out), chunk=CHUNK)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = _stderr_lines(done.stderr)
    holder = f"zhlm-predict (pid {os.getpid()} on host {socket.gethostname()}, started "
    assert line.startswith(f"zhlm-predict: output {out} is in use by {holder}"), line
    assert line.endswith("wait for it to finish or stop it, or pick another --output"), line
    assert not out.exists()
    assert predict_file(classifier, reviews, str(out), chunk=CHUNK) == 100  # released
    assert not os.path.exists(f"{out}.lock")


def _filling_disk(output: str, after: int):
    """An ``os.write`` for which, from its ``after``+1-th write to ``output`` on, the disk
    fills up: that write puts down half of what it is given, the next fails with ENOSPC."""
    import errno
    import os

    write, calls = os.write, []

    def limited(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}") != output:
            return write(fd, data)
        calls.append(fd)
        if len(calls) <= after:
            return write(fd, data)
        if len(calls) == after + 1:
            return write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return limited


@pytest.mark.slow
def test_a_full_disk_keeps_the_complete_records_and_says_how_to_continue(
    workdirs, classifier, tmp_path, monkeypatch
):
    """In process: a disk that fills up in the middle of the second chunk leaves the first
    chunk's records, no half record, and one line; once there is space, the same call ends
    with the bytes of a run that never stopped. Through the command: one line, exit 1."""
    reviews = _lines(tmp_path / "reviews.tsv", 300)
    whole = tmp_path / "whole.jsonl"
    predict_file(classifier, reviews, str(whole), chunk=CHUNK)
    out = tmp_path / "out.jsonl"
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", _filling_disk(str(out), after=1))
        with pytest.raises(UserError) as refused:
            predict_file(classifier, reviews, str(out), chunk=CHUNK)
    assert str(refused.value) == (
        f"no space left to write {out} (No space left on device): it keeps its {CHUNK} "
        "complete records; free space and run the same command again to continue after them"
    )
    assert out.read_bytes() == whole.read_bytes()[: len(out.read_bytes())]
    assert out.read_bytes().endswith(b"\n") and len(out.read_bytes().splitlines()) == CHUNK
    assert predict_file(classifier, reviews, str(out), chunk=CHUNK) == 300
    assert out.read_bytes() == whole.read_bytes()
    cli_out = tmp_path / "cli.jsonl"
    code = inspect.getsource(_filling_disk)
    code += f"import os, sys\nos.write = _filling_disk({str(cli_out)!r}, after=0)\n"
    code += "sys.argv = ['zhlm-predict', *sys.argv[1:]]\n"
    code += "from zhlm.cli import predict\npredict.run()\n"
    cmd = [sys.executable, "-c", code, f"--workdir={workdirs['classification']}"]
    cmd += [f"--input={reviews}", f"--output={cli_out}"]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert _stderr_lines(done.stderr) == [
        f"zhlm-predict: no space left to write {cli_out} (No space left on device): it keeps "
        "its 0 complete records; free space and run the same command again to continue after "
        "them"
    ]
    assert cli_out.read_bytes() == b""


# ------------------------------------------------- length and batch, the summary, a second run


def _run(workdir, path, out, *flags):
    """zhlm-predict in a process of its own (the session's compilation cache, inherited)."""
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={workdir}"]
    cmd += [f"--input={path}", f"--output={out}", *flags]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT)
    )


@pytest.mark.slow
def test_length_and_batch_flags_predict_as_inputs_already_cut_and_a_rerun_compiles_nothing(
    workdirs, tmp_path
):
    """``--max_seq_length=12 --batch_size=2`` on a classifier run at 32 tokens writes what the
    run's own settings write for the inputs cut to 10 tokens; the first line says the settings
    and why, the last what was computed. The same command again (another output) reads every
    program from the compilation cache: nothing compiled; with ``--quiet``, nothing on stdout.
    A length above the position table is one line, exit 1."""
    texts = tmp_path / "long.txt"
    texts.write_text("\n".join(LONG_REVIEWS) + "\n", encoding="utf-8")
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(cut_to_tokens(LONG_REVIEWS, 10)) + "\n", encoding="utf-8")
    predict(workdirs["classification"], str(cut), str(tmp_path / "cut.jsonl"))
    expected = [json.loads(line) for line in open(tmp_path / "cut.jsonl", encoding="utf-8")]

    first = _run(workdirs["classification"], texts, tmp_path / "a.jsonl", *KNOBS)
    assert first.returncode == 0, first.stderr[-3000:]
    lines = first.stdout.splitlines()
    assert lines[0] == "zhlm-predict: length 12 (asked), batch 2 (asked)"
    assert re.fullmatch(
        r"zhlm-predict: 3 records in [\d.]+ s \([\d,]+ examples/s\), \d+ programs? compiled in "
        r"[\d.]+ s(, \d+ read from the compilation cache)?, real tokens 75% of the positions "
        r"computed, packed 2 rows a batch",
        lines[-2],
    ), lines
    records = [json.loads(line) for line in open(tmp_path / "a.jsonl", encoding="utf-8")]
    assert [r["text"] for r in records] == LONG_REVIEWS
    assert [r["label"] for r in records] == [r["label"] for r in expected]
    for ours, theirs in zip(records, expected, strict=True):
        assert ours["probabilities"] == pytest.approx(theirs["probabilities"], rel=1e-5)

    again = _run(workdirs["classification"], texts, tmp_path / "b.jsonl", *KNOBS, "--quiet")
    assert again.returncode == 0 and again.stdout == "", again.stderr[-3000:]
    said = _stderr_lines(again.stderr)
    assert "zhlm-predict: length 12 (asked), batch 2 (asked)" in said
    (summary,) = [line for line in said if " records in " in line]
    assert ", 0 programs compiled in 0.0 s, " in summary, summary
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()

    refused = _run(workdirs["classification"], texts, tmp_path / "c.jsonl", "--max_seq_length=513")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert _stderr_lines(refused.stderr) == [
        "zhlm-predict: max_seq_length=513 is above the model's position table (512 rows): give "
        "512 or less"
    ]
    assert not (tmp_path / "c.jsonl").exists()


KNOBS = ("--max_seq_length=12", "--batch_size=2")
