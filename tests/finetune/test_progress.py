"""An interrupted fine-tuning continues after its last finished epoch and ends where an
uninterrupted run ends (the same results, each epoch in metrics.jsonl once); a finished run is
refused without ``--overwrite``; a changed config, or a file whose content changed, does not
continue another's progress; a damaged progress/ and a full disk stop the command in one line
naming the file and the way forward."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, cut_orbax, load_task, reviews_config

from zhlm.finetune import progress as progress_lib
from zhlm.finetune.train import finetune


def _config(tmp_path):
    config = reviews_config(tmp_path, rows=48, epochs=3, seeds=2)
    config.optim.peak_lr = 1e-3
    return config


def _lines(workdir):
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


class Stop(Exception):
    pass


@pytest.mark.slow
def test_an_interrupted_run_continues_to_the_uninterrupted_results(tmp_path, monkeypatch):
    whole = finetune(_config(tmp_path), None, str(tmp_path / "whole"))

    saved, calls = progress_lib.Progress.save_epoch, []

    def stop_after_four(self, *args, **kwargs):
        saved(self, *args, **kwargs)
        calls.append(args[:2])
        if len(calls) == 4:  # seed 0 done, seed 1 after its first epoch
            raise Stop

    monkeypatch.setattr(progress_lib.Progress, "save_epoch", stop_after_four)
    with pytest.raises(Stop):
        finetune(_config(tmp_path), None, str(tmp_path / "cut"))
    monkeypatch.setattr(progress_lib.Progress, "save_epoch", saved)
    config = _config(tmp_path)
    config.train.epochs = 2
    with pytest.raises(ValueError, match="interrupted run of another config.*train.epochs: 3 -> 2"):
        finetune(config, None, str(tmp_path / "cut"))
    cut = finetune(_config(tmp_path), None, str(tmp_path / "cut"))

    for key in ("seeds", "max", "mean", "best_seed_index"):
        assert cut[key] == whole[key], key
    assert [(r["split"], r["step"]) for r in _lines(tmp_path / "cut")] == [
        (r["split"], r["step"]) for r in _lines(tmp_path / "whole")
    ]
    assert not (tmp_path / "cut" / "progress").exists() and (tmp_path / "cut" / "best").is_dir()


@pytest.mark.slow
def test_a_finished_run_is_refused_without_overwrite(tmp_path):
    config = _config(tmp_path)
    config.train.update(epochs=1, seeds=1)
    finetune(config, None, str(tmp_path / "run"))
    with pytest.raises(progress_lib.FinishedRun, match="holds a finished run .*--overwrite"):
        finetune(config, None, str(tmp_path / "run"))
    again = finetune(config, None, str(tmp_path / "run"), overwrite=True)
    assert again["seeds"][0]["epochs"][0]["epoch"] == 1


# An interrupted run on one file, its flags as the command line gives them, so that the
# command continues (or refuses) what the library started.
FLAGS = {
    "task.dev_file": "",
    "task.holdout": 0.25,
    "task.max_seq_length": 16,
    "task.length_buckets": (16,),
    "train.epochs": 2,
    "train.seeds": 1,
    "train.batch_size": 8,
    "train.log_every": 0,
    "optim.peak_lr": 1e-3,
}


def _flags_config(train_file):
    config = load_task("chnsenticorp", shared=False)
    config.unlock()
    config.task.train_file = str(train_file)
    for key, value in FLAGS.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


def _command(workdir, train_file, *extra):
    """``zhlm-finetune`` on the interrupted run's flags; its exit code and stderr lines."""
    flags = {**FLAGS, "task.train_file": train_file, "task.length_buckets": "(16,)"}
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", "--config=finetune/chnsenticorp:tiny"]
    cmd += [f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in flags.items()), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    return done.returncode, done.stderr.strip().splitlines()


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """``(workdir, train_file)``: a two-epoch run stopped after its first epoch (progress/
    holds epoch 1); tests continue copies of the workdir."""
    root = tmp_path_factory.mktemp("interrupted")
    rows = [(str(i % 2), ("好评" if i % 2 else "差评") + f"第{i}条") for i in range(32)]
    train_file = root / "reviews.tsv"
    train_file.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in rows), "utf-8")
    saved = progress_lib.Progress.save_epoch

    def stop_after_one(self, *args, **kwargs):
        saved(self, *args, **kwargs)
        raise Stop

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(progress_lib.Progress, "save_epoch", stop_after_one)
        with pytest.raises(Stop):
            finetune(_flags_config(train_file), None, str(root / "work"))
    assert sorted(os.listdir(root / "work" / "progress")) == [
        "best-0-1", "progress.json", "state-0-1"
    ]  # fmt: skip
    return root / "work", train_file


def _copy(interrupted, tmp_path):
    workdir = tmp_path / "work"
    shutil.copytree(interrupted[0], workdir)
    return workdir


@pytest.mark.slow
def test_a_training_file_changed_in_place_is_refused_naming_it(interrupted, tmp_path):
    workdir, train_file = _copy(interrupted, tmp_path), interrupted[1]
    original = train_file.read_bytes()
    lines = original.decode().splitlines(keepends=True)
    flipped = [lines[0]] + [("1" if t[0] == "0" else "0") + t[1:] for t in lines[1:]]
    try:  # every label flipped, the name, size and config unchanged
        train_file.write_text("".join(flipped), "utf-8")
        with pytest.raises(progress_lib.InputsChanged) as refused:
            finetune(_flags_config(train_file), None, str(workdir))
    finally:
        train_file.write_bytes(original)
    message = str(refused.value)
    assert f"{train_file} has changed since the interrupted run" in message
    assert "put the original file back" in message and "--overwrite" in message
    assert "\n" not in message
    continued = finetune(_flags_config(train_file), None, str(workdir))  # the original back
    assert [e["epoch"] for e in continued["seeds"][0]["epochs"]] == [1, 2]


def test_fingerprints_hash_content_of_each_listed_file(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("[1]")
    b.write_text("[2]")
    task = load_task("c3", shared=False).task
    task.unlock()
    task.update(train_file=f"{a}, {b}", dev_file=str(a))
    before = progress_lib.fingerprints(task)
    assert set(before) == {str(a), str(b)} and before[str(a)] != before[str(b)]
    stamp = os.stat(b)
    b.write_text("[3]")
    os.utime(b, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # same size and date
    after = progress_lib.fingerprints(task)
    assert after[str(a)] == before[str(a)] and after[str(b)] != before[str(b)]


def _size(folder) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder) for f in fs)


def _damage_state(workdir):
    cut_orbax(workdir / "progress" / "state-0-1")
    return "progress/state-0-1"


def _zero_state_file(workdir):
    """One data file of the state overwritten with zeros, its size kept."""
    for root, _, files in os.walk(workdir / "progress" / "state-0-1"):
        for name in files:
            path = os.path.join(root, name)
            if os.sep + "d" in root and os.path.getsize(path) > 1000:
                with open(path, "r+b") as f:
                    f.write(bytes(os.path.getsize(path)))
    return "progress/state-0-1"


def _delete_state(workdir):
    shutil.rmtree(workdir / "progress" / "state-0-1")
    return "progress/state-0-1 is missing"


def _damage_best(workdir):
    cut_orbax(workdir / "progress" / "best-0-1" / "params")
    return "progress/best-0-1/params"


def _damage_progress_file(workdir):
    path = workdir / "progress" / "progress.json"
    path.write_text(path.read_text()[:88])
    return "progress/progress.json"


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage", [_damage_state, _zero_state_file, _delete_state, _damage_best, _damage_progress_file]
)
def test_damaged_progress_stops_in_one_line_naming_the_file(interrupted, tmp_path, damage):
    workdir = _copy(interrupted, tmp_path)
    named = damage(workdir)
    code, lines = _command(workdir, interrupted[1])
    assert code == 1, "\n".join(lines[-30:])
    said = [line for line in lines if line.startswith("zhlm-finetune:")]
    assert not any("Traceback" in line or "Event loop" in line for line in lines), lines[-30:]
    assert said[-1] == lines[-1], lines[-30:]
    assert named in said[-1] and "pass --overwrite to start the run anew" in said[-1]
    # The other stderr lines are the reports of reading the file, none about the damage.
    assert len([line for line in lines if "progress" in line]) == 1, lines


@pytest.mark.slow
def test_a_full_disk_stops_in_one_line_and_the_same_command_continues(interrupted, tmp_path):
    """A tmpfs that holds the first epoch's progress and half a train state more: the second
    epoch's state does not fit beside the first's."""
    disk = tmp_path / "disk"
    disk.mkdir()
    kept, state = (_size(p) for p in (interrupted[0], interrupted[0] / "progress" / "state-0-1"))
    size = f"size={(kept + state // 2) // 1024}k"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("mounting a tmpfs needs root")  # CI runs as root
    try:
        workdir = disk / "work"
        shutil.copytree(interrupted[0], workdir)
        code, lines = _command(workdir, interrupted[1])
        assert code == 1, "\n".join(lines[-30:])
        assert not any("Traceback" in line for line in lines), lines[-30:]
        (line,) = [t for t in lines if t.startswith("zhlm-finetune: no space")]
        assert line == lines[-1], lines[-30:]
        assert f"no space left in {workdir} to write {workdir}/progress/state-0-2" in line
        assert "a train state takes" in line and "MB are free" in line
        assert "continue after epoch 1 of seed 0" in line
        progress = json.loads((workdir / "progress" / "progress.json").read_text())
        assert progress["current"]["epoch"] == 1
        assert sorted(os.listdir(workdir / "progress")) == [
            "best-0-1",
            "progress.json",
            "state-0-1",
        ]  # fmt: skip (the cut write removed, the kept epoch whole)
    finally:
        subprocess.run(["umount", str(disk)])
