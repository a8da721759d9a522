"""``zhlm.train.resume`` and the parts of ``zhlm.train.checkpoint`` a restore goes through: a
changed config is refused with what differs and the workdir untouched; a workdir where no step
restores is refused (and started anew only when asked, the old run kept); ``init_from`` takes
the newest step that reads; a full disk stops in one line with the last checkpoint intact;
orbax's own tracebacks stay off the terminal; a resumed run has one metric line per step."""

import filecmp
import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import ROOT, load_config

from zhlm.train import checkpoint, metrics, resume
from zhlm.train.loop import train_and_evaluate

CORPUS = os.path.join(ROOT, "zhlm", "resources", "peoples_daily_199801_sample.txt")
OVERRIDES = {
    "data.max_seq_length": 64,
    "train.batch_size": 8,
    "train.num_steps": 8,
    "train.log_every": 1,
    "train.eval_every": 0,
    "train.checkpoint_every": 4,
    "optim.warmup_steps": 2,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first ~30 KB of the bundled People's Daily sample (whole documents)."""
    text = open(CORPUS, encoding="utf-8").read()
    path = tmp_path_factory.mktemp("resume") / "corpus.txt"
    path.write_text(text[: text.index("\n\n", 30_000) + 2], encoding="utf-8")
    return str(path)


def make_config(corpus, **changes):
    config = load_config("bert", "tiny")
    config.data.input = (corpus,)
    for key, value in {**OVERRIDES, **changes}.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """A finished 8-step run with checkpoints at steps 4 and 8; tests work on copies."""
    workdir = tmp_path_factory.mktemp("trained")
    state = train_and_evaluate(make_config(corpus), str(workdir))
    return str(workdir), jax.device_get(state["params"])


def copy(trained, tmp_path) -> str:
    workdir = str(tmp_path / "work")
    shutil.copytree(trained[0], workdir)
    return workdir


def damage(workdir, step):
    """Cuts every data file of a step to a third, as a crash during its write would."""
    for root, _, files in os.walk(os.path.join(workdir, "checkpoints", str(step), "state")):
        if os.sep + "d" in root:
            for name in files:
                with open(os.path.join(root, name), "r+b") as f:
                    f.truncate(max(os.path.getsize(f.name) // 3, 1))


def snapshot(workdir) -> dict:
    return {
        os.path.relpath(os.path.join(root, name), workdir): open(
            os.path.join(root, name), "rb"
        ).read()
        for root, _, files in os.walk(workdir)
        for name in files
        if "tensorboard" not in root
    }


def cli(workdir, corpus, *extra):
    flags = {**OVERRIDES, "data.input": f"('{corpus}',)"}
    cmd = [sys.executable, "-m", "zhlm.cli.pretrain", f"--config={ROOT}/configs/bert.py:tiny"]
    cmd += [f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in flags.items()), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_a_changed_config_is_refused_with_what_differs_and_nothing_written(
    trained, corpus, tmp_path
):
    workdir = copy(trained, tmp_path)
    before = snapshot(workdir)
    changed = make_config(corpus, **{"optim.name": "lamb", "train.num_steps": 12})
    with pytest.raises(resume.CheckpointError) as err:
        train_and_evaluate(changed, workdir)
    message = str(err.value)
    assert "checkpoint 8" in message and "--config.train.restart=True" in message
    assert "optim.name: 'adamw' -> 'lamb'" in message
    assert "train.num_steps: 8 -> 12" in message
    assert "opt_state/" in message  # the state's differing keys
    assert snapshot(workdir) == before  # checkpoints, config.json and metrics untouched

    # A change that keeps the state's tree continues the run (and records the new config).
    longer = make_config(corpus, **{"train.num_steps": 12})
    train_and_evaluate(longer, workdir)
    assert json.load(open(os.path.join(workdir, "config.json")))["train"]["num_steps"] == 12
    assert [line["step"] for line in metrics.read(workdir)] == list(range(1, 13))


@pytest.mark.slow
def test_another_recipe_is_refused_even_with_the_same_tree(trained, corpus, tmp_path):
    workdir = copy(trained, tmp_path)
    saved = json.load(open(os.path.join(workdir, "config.json")))
    saved["recipe"] = "roberta_wwm"  # as if the same shapes had come from another recipe
    with open(os.path.join(workdir, "config.json"), "w") as f:
        json.dump(saved, f)
    with pytest.raises(resume.CheckpointError, match="recipe: 'roberta_wwm' -> 'bert'"):
        train_and_evaluate(make_config(corpus), workdir)


@pytest.mark.slow
def test_no_step_restores_refused_in_one_line_then_restarted_on_request(trained, corpus, tmp_path):
    workdir = copy(trained, tmp_path)
    damage(workdir, 4)
    damage(workdir, 8)
    before = snapshot(workdir)
    refused = cli(workdir, corpus)
    assert refused.returncode == 1, refused.stderr[-3000:]
    (line,) = [t for t in refused.stderr.splitlines() if t.startswith("zhlm-pretrain:")]
    assert "no checkpoint in" in line and "step 8: " in line and "step 4: " in line
    assert "--config.train.restart=True" in line
    assert "Traceback" not in refused.stderr and "Event loop is closed" not in refused.stderr
    assert snapshot(workdir) == before  # nothing moved aside, nothing appended

    restarted = cli(workdir, corpus, "--config.train.restart=True")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert "the previous run is kept in" in restarted.stdout
    kept = os.path.join(workdir, "previous-1")
    assert sorted(os.listdir(os.path.join(kept, "checkpoints"))) == ["4", "8"]
    assert filecmp.cmp(
        os.path.join(kept, "metrics.jsonl"), os.path.join(trained[0], "metrics.jsonl")
    )
    assert [line["step"] for line in metrics.read(workdir)] == list(range(1, 9))
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4", "8"]


def test_resume_past_a_damaged_step_moves_it_aside_and_logs_each_step_once(
    trained, corpus, tmp_path
):
    workdir = copy(trained, tmp_path)
    damage(workdir, 8)
    metrics_file = os.path.join(workdir, "metrics.jsonl")
    with open(metrics_file, "a") as f:  # a line cut short by a kill during its write
        f.write('{"step": 9, "split": "tr')
    again = train_and_evaluate(make_config(corpus), workdir)  # restores 4, trains 5..8 again
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4", "8", "corrupt-8"]
    assert [line["step"] for line in metrics.read(workdir)] == list(range(1, 9))
    for a, b in zip(
        jax.tree_util.tree_leaves(trained[1]), jax.tree_util.tree_leaves(again["params"]),
        strict=True,
    ):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_init_from_takes_the_newest_step_that_reads(trained, tmp_path, caplog):
    workdir = copy(trained, tmp_path)
    assert checkpoint.load(workdir).description.endswith("(step 8)")  # the newest step
    damage(workdir, 8)
    loaded = checkpoint.load(workdir)
    assert loaded.description.endswith("(step 4)")
    assert "took step 4; newer steps do not read (step 8: " in caplog.text
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["4", "8"]  # untouched
    damage(workdir, 4)
    with pytest.raises(ValueError, match="no checkpoint reads .step 8: .*step 4: "):
        checkpoint.load(workdir)


@pytest.mark.slow
def test_a_full_disk_stops_in_one_line_with_the_last_checkpoint_intact(corpus, tmp_path):
    """A tmpfs just large enough for the two steps of a 12-step run (each ~36 MB): the third
    save fails for space."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=80m", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")  # CI runs as root
    try:
        run = cli(disk / "work", corpus, "--config.train.num_steps=12")
        assert run.returncode == 1, run.stderr[-3000:]
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        (line,) = [t for t in run.stderr.splitlines() if t.startswith("zhlm-pretrain:")]
        assert "no space left in" in line and "MB are free" in line, line
        assert "the last checkpoint is step 8, intact" in line, line
        assert sorted(os.listdir(disk / "work" / "checkpoints")) == ["4", "8"]
        state = checkpoint.load(str(disk / "work"))  # the last good step reads
        assert state.description.endswith("(step 8)")
    finally:
        subprocess.run(["umount", str(disk)])
