"""The task configs on the shared data, the holdout split, and files that cannot train.

Files that cannot train stop ``zhlm-finetune`` with one line that says why and what to pass
(``zhlm.finetune.task_files`` and the kinds' training-set checks), never a traceback or a run
on garbage: an empty or header-only file, a folder, integer labels, swapped columns, a file
that is mostly not text, NER tags that are all ``O``. Each case gives the file, the flags, the
line's expected text and what must not be printed before it."""

import collections
import os
import subprocess
import sys

import pytest
from helpers import DATA, ROOT, binary_file, load_task, read_task

from zhlm import defaults
from zhlm.errors import UserError
from zhlm.finetune import kinds, task_files
from zhlm.finetune.train import finetune


def reviews(count=30):
    """``(label, text)`` of the first ``count`` ChnSentiCorp dev reviews."""
    with open(os.path.join(DATA, "chnsenticorp", "dev.tsv"), encoding="utf-8") as f:
        rows = f.read().splitlines()[1 : count + 1]
    return [tuple(row.split("\t", 1)) for row in rows]


def finetune_command(tmp_path, config, train, *flags):
    """zhlm-finetune's exit status, stdout and stderr lines on ``train`` (20% held out)."""
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", f"--config={ROOT}/configs/finetune/{config}"]
    cmd += [f"--workdir={tmp_path / 'run'}", f"--config.task.train_file={train}"]
    cmd += ["--config.task.dev_file=", "--config.task.holdout=0.2", *flags]
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT)
    )
    return done.returncode, done.stdout, done.stderr.strip().splitlines()


def _empty(tmp_path):
    path = tmp_path / "empty.tsv"
    path.write_text("")
    return path, (), f"{path} is empty (0 bytes): give a file with records", None


def _header_only(tmp_path):
    path = tmp_path / "header.tsv"
    path.write_text("label\ttext_a\n")
    return path, (), f"{path} holds no records (a header alone?): give a file with records", None


def _folder(tmp_path):
    return tmp_path, (), f"{tmp_path} is a folder: give the file in it to read", None


def _integer_labels(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in reviews()))
    expected = (
        "config.task.labels=(0, 1): labels are strings, as the file writes them: "
        "--config.task.labels=\"('0','1')\""
    )
    # Said once, not once a row: no unknown_label report comes before it.
    return path, ("--config.task.labels=(0,1)",), expected, "unknown_label"


def _swapped_columns(tmp_path):
    """The header names the texts' column ``label``: the hint names the other mapping, not
    the header's again."""
    path = tmp_path / "swapped.tsv"
    path.write_text("label\ttext_a\n" + "".join(f"{b}\t{a}\n" for a, b in reviews()))
    expected = (
        "column 'text_a' looks like labels (2 values: 0, 1); try --config.task.format=tsv "
        "--config.task.text_fields=label --config.task.label_field=text_a"
    )
    return path, (), expected, None


def _binary(tmp_path):
    path = binary_file(tmp_path / "binary.tsv")
    expected = (
        "mostly unreadable as format tsv (41 records unreadable, 2 read): the file looks like"
    )
    return path, (), expected, None


CASES = [_empty, _header_only, _folder, _integer_labels, _swapped_columns, _binary]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.__name__.strip("_"))
def test_a_training_file_that_cannot_train_is_one_line_through_the_command(tmp_path, case):
    train, flags, expected, unsaid = case(tmp_path)
    status, out, err = finetune_command(tmp_path, "chnsenticorp.py:tiny", train, *flags)
    assert status != 0 and not any("Traceback" in line for line in err), err[-20:]
    assert err[-1].startswith("zhlm-finetune: ") and expected in err[-1], err[-1]
    assert unsaid is None or unsaid not in out


@pytest.mark.slow
def test_ner_tags_that_are_all_o_are_refused_through_the_command(tmp_path):
    """A tag file whose every tag is O (a column of another file, a tagger's empty output)
    would train to F1 0 without a word; as a one-class classification file, it is refused."""
    with open(os.path.join(DATA, "msra_ner", "dev.txt"), encoding="utf-8") as f:
        sentences = f.read().split("\n\n")[:40]
    path = tmp_path / "all_o.txt"
    path.write_text(
        "\n\n".join(
            "\n".join(line.split("\t")[0] + "\tO" for line in s.splitlines()) for s in sentences
        )
        + "\n"
    )
    status, out, err = finetune_command(
        tmp_path, "msra_ner.py:tiny", path, "--config.task.labels=()"
    )
    assert status != 0 and "tags from" in out
    assert err[-1] == (
        f"zhlm-finetune: {path}: every tag of its 32 training sentences is O; a tagger needs "
        "entities to learn: check the tag column (char<TAB>tag, B-/I- tags)"
    )


def test_a_mostly_unreadable_file_is_refused_and_a_mostly_readable_one_read(tmp_path):
    """More unreadable records than read ones: refused (training and evaluation files alike);
    as many read as not: read, the bad ones reported."""
    task = defaults.get_finetune_config("tiny").task
    path = binary_file(tmp_path / "binary.tsv")
    task.update(train_file=str(path), dev_file=str(path), labels=("0", "1"))
    with pytest.raises(UserError, match=r"binary.tsv: mostly unreadable as format tsv \(41 recor"):
        read_task(task)
    rows = [f"{text}\t{label}" for label, text in reviews(41)]
    path = binary_file(tmp_path / "half.tsv", rows)
    task.update(train_file=str(path), dev_file=str(path))
    train, _, reports = read_task(task)
    assert len(train) == 41 and reports[0].counts == {"malformed_line": 41}


# ------------------------------------------------------------------- configs and holdout


def check_task(task):
    task_files.check_task(kinds.get(task.kind), task)


TASKS = ("chnsenticorp", "lcqmc", "ocnli", "cmrc2018", "msra_ner", "c3")


@pytest.mark.parametrize("name", TASKS)
def test_task_configs_load_and_point_at_the_shared_data(name):
    with pytest.raises(ValueError, match=r"^config.task.train_file is empty: pass --config"):
        check_task(load_task(name, shared=False).task)  # no path but the user's
    config = load_task(name)
    check_task(config.task)
    files = f"{config.task.train_file},{config.task.dev_file}".strip(",").split(",")
    assert all(os.path.isfile(f) for f in files)
    assert config.model.size == "tiny" and config.optim.schedule == "linear"
    with pytest.raises(AttributeError):
        config.task.max_seq_len = 64  # locked: a typo is an error, not a new key


def test_holdout_splits_are_seeded_stratified_draws_and_keep_passages_whole():
    lcqmc = load_task("lcqmc")
    train, held, _ = read_task(lcqmc.task)
    assert (len(train), len(held)) == (7042, 1760)
    assert collections.Counter(e.label for e in held) == {"0": 880, "1": 880}  # 4400 / 4402
    lines = [e.line for e in held]
    assert lines == sorted(lines) and lines[-1] - lines[0] > 8000  # drawn over the whole file
    again, _, _ = read_task(load_task("lcqmc").task)
    assert [e.line for e in again] == [e.line for e in train]
    train, held, _ = read_task(load_task("cmrc2018").task)
    passages = {e.context for e in train}, {e.context for e in held}
    assert (len(passages[0]), len(passages[1])) == (678, 170)
    assert not passages[0] & passages[1]
    assert len(train) + len(held) == 3219


def test_a_missing_file_is_one_clear_error(tmp_path):
    config = load_task("ocnli")
    config.task.train_file = str(tmp_path / "nowhere.json")
    with pytest.raises(FileNotFoundError, match="nowhere.json: no such file"):
        finetune(config, None, str(tmp_path / "w"))
