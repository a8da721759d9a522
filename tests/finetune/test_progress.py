"""An interrupted fine-tuning continues after its last finished epoch and ends where an
uninterrupted run ends (the same results, each epoch in metrics.jsonl once); a finished run is
refused without ``--overwrite``; a changed config does not continue another's progress."""

import json

import pytest
from helpers import load_task

from zhlm.finetune import progress as progress_lib
from zhlm.finetune.train import finetune


def _config(tmp_path):
    rows = [(str(i % 2), ("好评" if i % 2 else "差评") + f"第{i}条") for i in range(48)]
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in rows), "utf-8")
    config = load_task("chnsenticorp", shared=False)
    config.unlock()
    config.task.update(train_file=str(path), dev_file="", holdout=0.25, max_seq_length=16)
    config.train.update(epochs=3, seeds=2, batch_size=8, log_every=0)
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
