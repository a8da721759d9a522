"""How failures reach the user of every program: an expected one (bad input or flags, a
refusal: a ``zhlm.errors.UserError``) is one line and exit status 1; anything else (a bug)
keeps its traceback; Ctrl-C is one line saying that the same command continues, exit status
130; an output on a read-only place is one line naming it.

Each case runs the real program in a child process: what is under test is what the user sees.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest
from helpers import DATA, ROOT

from zhlm.cli import failures
from zhlm.errors import NotFound, UserError

# absl's log lines (the TFDS builder logs while zhlm-prepare starts): not the program's own.
LOG_LINE = re.compile(r"^[IWEF]\d{4} ")
# A progress bar's refreshes, read from a pipe as lines of their own, and an epoch's summary.
PROGRESS = re.compile(r"(\?|\d)(step|input)/s\]|^zhlm-finetune: seed \d+ epoch \d+/|^\s*$")


def _env():
    return dict(os.environ, PYTHONPATH=ROOT)  # this checkout's zhlm, whatever is installed


def _program(name, args, internal=None):
    """``zhlm-NAME ARGS`` in a child process: ``(exit status, stderr)``. ``internal``
    (``"module.function"``) is replaced first by a function that raises a plain ValueError, as
    a bug in zhlm would."""
    code = ["import importlib, sys"]
    if internal:
        module, function = internal.rsplit(".", 1)
        code += [
            "def bug(*args, **kwargs):",
            "    raise ValueError('an internal bug')",
            f"setattr(importlib.import_module({module!r}), {function!r}, bug)",
        ]
    code += [
        f"sys.argv = ['zhlm-{name}', *{list(map(str, args))!r}]",
        f"importlib.import_module('zhlm.cli.{name}').run()",
    ]
    cmd = [sys.executable, "-c", "\n".join(code)]
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    return done.returncode, done.stderr


def _own_lines(stderr):
    return [line for line in stderr.strip().splitlines() if not LOG_LINE.match(line)]


@pytest.fixture
def model(workdirs):
    """A fine-tuning workdir holding a random tiny classifier, as zhlm-finetune leaves one."""
    return workdirs["classification"]


def _cases(tmp):
    """Per program: its arguments for a user's mistake, the line it must print, and the
    library call its main makes (replaced by a bug in the other test)."""
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    return {
        "finetune": (
            ["--config=finetune/chnsenticorp:tiny", f"--workdir={tmp / 'w'}"],
            "zhlm-finetune: config.task.train_file is empty: pass --config.task.train_file=PATH",
            "zhlm.finetune.train.finetune",
        ),
        "predict": (
            [f"--workdir={tmp / 'none'}", f"--input={tmp / 'x.txt'}", f"--output={tmp / 'o'}"],
            f"zhlm-predict: {tmp / 'none'}: no fine-tuned model",
            "zhlm.finetune.predict.predict",
        ),
        "convert": (
            [f"--input={tmp / 'none'}", f"--output={tmp / 'hf'}"],
            f"zhlm-convert: {tmp / 'none'}: not a directory (expected a model folder)",
            "zhlm.convert.read_hf",
        ),
        "pretrain": (
            ["--config=bert:tiny", f"--workdir={tmp / 'p'}", f"--config.data.data_dir={empty}"],
            f"zhlm-pretrain: no prepared dataset at {empty}/",
            "zhlm.train.loop.train_and_evaluate",
        ),
        "prepare": (
            ["--config=bert:tiny", f"--input={tmp / 'none'}/*.txt", f"--data_dir={tmp / 'd'}"],
            f"zhlm-prepare: no input files: ['{tmp / 'none'}/*.txt'] matched nothing",
            "zhlm.data.builder.prepare",
        ),
        "compile": (
            ["--config=bert:tiny", "--topology=v9-8"],
            "zhlm-compile: unknown TPU accelerator type 'v9-8'",
            "zhlm.train.plan.compile_plan",
        ),
        "curves": (
            [f"--workdir={empty}"],
            f"zhlm-curves: {empty}: metrics.jsonl has no lines to draw",
            "zhlm.train.curves.plot",
        ),
    }


PROGRAMS = ["finetune", "predict", "convert", "pretrain", "prepare", "compile", "curves"]


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_a_users_mistake_is_one_line_and_exit_status_1(name, tmp_path):
    args, line, _ = _cases(tmp_path)[name]
    status, stderr = _program(name, args)
    assert status == 1 and "Traceback" not in stderr, stderr[-3000:]
    (own,) = _own_lines(stderr)
    assert own.startswith(line), own


@pytest.mark.slow
@pytest.mark.parametrize("name", PROGRAMS)
def test_a_bug_keeps_its_traceback(name, tmp_path):
    """A plain ValueError where the program calls the library is not taken for the user's
    mistake: the traceback names where it came from."""
    args, _, call = _cases(tmp_path)[name]
    status, stderr = _program(name, args, internal=call)
    assert status == 1, stderr[-3000:]
    assert "Traceback (most recent call last)" in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "ValueError: an internal bug"


def test_only_user_errors_and_ctrl_c_become_one_line(capsys):
    with pytest.raises(SystemExit) as stop, failures.one_line("zhlm-x"):
        raise NotFound("/nowhere: no such file")
    assert stop.value.code == "zhlm-x: /nowhere: no such file"
    with pytest.raises(SystemExit) as stop, failures.one_line("zhlm-x", rewrite=str.upper):
        raise UserError("bad flag")
    assert stop.value.code == "zhlm-x: BAD FLAG"
    with pytest.raises(SystemExit) as stop, failures.one_line("zhlm-x", ": rerun it"):
        raise KeyboardInterrupt
    assert stop.value.code == failures.INTERRUPTED == 130
    assert capsys.readouterr().err == "zhlm-x: interrupted: rerun it\n"
    for bug in (ValueError("x"), FileNotFoundError("y"), KeyError("z")):
        with pytest.raises(type(bug)), failures.one_line("zhlm-x"):
            raise bug


# ------------------------------------------------------------------------------- Ctrl-C


def _interrupt(cmd, after: str, timeout: float = 600):
    """Runs ``cmd``, sends SIGINT to its process group, as Ctrl-C in a terminal does, once a
    line of its output (stdout and stderr) contains ``after``; returns its exit status and the
    lines it printed from then on."""
    child = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a process group of its own, as a command in a terminal
    )
    watchdog = threading.Timer(timeout, child.kill)
    watchdog.start()
    try:
        seen = []
        for line in child.stdout:
            seen.append(line)
            if after in line:
                os.killpg(child.pid, signal.SIGINT)
                break
        else:
            pytest.fail(f"{after!r} never printed:\n{''.join(seen)[-3000:]}")
        rest = child.stdout.read().splitlines()
        return child.wait(), rest
    finally:
        watchdog.cancel()


def _one_interrupted_line(status, lines, program, then):
    text = "\n".join(lines)
    assert status == failures.INTERRUPTED, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-3000:]
    own = [line for line in lines if not PROGRESS.search(line)]
    assert own == [f"{program}: interrupted: the same command continues {then}"], text[-3000:]


@pytest.mark.slow
def test_ctrl_c_while_predicting_is_one_line_and_the_same_command_continues(model, tmp_path):
    reviews = tmp_path / "reviews.txt"
    with open(os.path.join(DATA, "chnsenticorp", "dev.tsv"), encoding="utf-8") as f:
        texts = [row.split("\t")[-1] for row in f.read().splitlines()[1:]]
    reviews.write_text("".join(texts[i % len(texts)] + "\n" for i in range(8000)))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={model}"]
    cmd += [f"--input={reviews}", f"--output={out}"]
    status, lines = _interrupt(cmd, after="input [")  # the progress bar: predicting
    after = f"after the last complete record in {out} (each is written whole)"
    _one_interrupted_line(status, lines, "zhlm-predict", after)
    kept = out.read_bytes()
    assert kept.endswith(b"\n") and len(kept.splitlines()) < 8000
    done = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"continuing after {len(kept.splitlines())} records already in {out}" in done.stdout
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert ids == [f"reviews.txt:{i}" for i in range(1, 8001)]


@pytest.mark.slow
def test_ctrl_c_while_fine_tuning_is_one_line(tmp_path):
    """SIGINT once epoch 1 is kept (epoch 2's progress bar has started), somewhere in the 19
    epochs that follow."""
    workdir = tmp_path / "cs"
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", "--config=finetune/chnsenticorp:tiny"]
    cmd += [f"--workdir={workdir}", f"--config.task.train_file={DATA}/chnsenticorp/train.tsv"]
    cmd += [f"--config.task.dev_file={DATA}/chnsenticorp/dev.tsv"]
    cmd += ["--config.task.max_seq_length=32", "--config.train.max_train_examples=400"]
    cmd += ["--config.train.max_eval_examples=100", "--config.train.epochs=20"]
    status, lines = _interrupt(cmd, after="seed 0 epoch 2/20:")
    then = "after the last finished epoch (what progress/ keeps is whole)"
    _one_interrupted_line(status, lines, "zhlm-finetune", then)
    assert (workdir / "progress" / "progress.json").is_file()
    assert not (workdir / "results.json").exists()


@pytest.mark.slow
def test_ctrl_c_while_pretraining_is_one_line(tmp_path):
    cmd = [sys.executable, "-m", "zhlm.cli.pretrain", "--config=macbert:tiny"]
    cmd += [f"--workdir={tmp_path / 'run'}", "--config.train.batch_size=8"]
    cmd += ["--config.train.num_steps=5000", "--config.optim.warmup_steps=2"]
    status, lines = _interrupt(cmd, after="from fresh initialisation, steps 0..5000")
    then = "from the last checkpoint (checkpoints are kept whole)"
    _one_interrupted_line(status, lines, "zhlm-pretrain", then)


# ------------------------------------------------------------------ a read-only output

# sysfs refuses new files to every user, root included: a read-only place wherever the tests
# run, where a folder made read-only with chmod would still be written by root.
READ_ONLY = "/sys"


@pytest.mark.slow
def test_an_output_on_a_read_only_place_is_one_line_naming_it(model, tmp_path):
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("很好\n太差\n")
    out = f"{READ_ONLY}/zhlm-test-predictions.jsonl"
    status, stderr = _program(
        "predict", [f"--workdir={model}", f"--input={reviews}", f"--output={out}"]
    )
    assert status == 1 and "Traceback" not in stderr, stderr[-3000:]
    (own,) = _own_lines(stderr)
    assert (
        own == f"zhlm-predict: cannot write {out} (Permission denied): choose a writable --output"
    )
    hf = f"{READ_ONLY}/zhlm-test-hf"
    status, stderr = _program("convert", [f"--input={model}", f"--output={hf}"])
    assert status == 1 and "Traceback" not in stderr, stderr[-3000:]
    (own,) = _own_lines(stderr)
    assert own.startswith(f"zhlm-convert: cannot write to --output={hf} ("), own
    assert own.endswith("): give a folder this user can write to"), own
