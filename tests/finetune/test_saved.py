"""A fine-tuned model as saved (``best/``): ``--init`` takes a finished fine-tuning workdir (the
encoder from its ``best/``, the head too where it fits the new task), and a ``best/`` whose
files were cut short is one line from ``zhlm-predict`` and ``zhlm-convert``, naming the folder
and what to do."""

import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import ROOT, cut_orbax, load_task, reviews_config
from ml_collections import ConfigDict

from zhlm.finetune import kinds, saved
from zhlm.finetune import train as train_lib
from zhlm.finetune.train import finetune
from zhlm.train import checkpoint


def test_init_reads_a_fine_tuning_workdirs_best_head_included(workdirs):
    workdir = workdirs["classification"]
    loaded = checkpoint.load(workdir)
    best = os.path.join(workdir, "best")
    assert loaded.description == f"zhlm checkpoint {best}"
    assert loaded.vocab == os.path.join(best, "vocab.txt")
    want = saved.load_finetuned(best)[1]
    for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(loaded.params), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))

    # Another task of the same shape (two classes, other labels) takes the encoder only too.
    task, kind = loaded.config.task, kinds.get("classification")
    assert "classifier" in train_lib._init_params(loaded, kind, task)
    for other in (dict(labels=("entailment", "neutral")), dict(kind="pair")):
        task = ConfigDict(dict(loaded.config.task, **other))
        assert "classifier" not in train_lib._init_params(loaded, kind, task)

    # A task of another shape (NER's seven tags against two classes) takes the encoder only.
    config = load_task("msra_ner")
    model = kinds.task_model(config)
    inputs = kinds.get("ner").example_inputs(config.task)
    fresh = saved.init_params(model, jax.random.key(1), inputs)
    merged, left_fresh = saved.merge(fresh, loaded.with_task_heads(), "classifier")
    assert left_fresh == ["classifier"]
    for part in ("embeddings", "encoder"):  # NER has no pooler
        for a, b in zip(*(jax.tree.leaves(p[part]) for p in (merged, loaded.params)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_fine_tuning_from_a_fine_tuning_workdir_keeps_a_head_that_fits(workdirs, tmp_path):
    config = reviews_config(tmp_path, epochs=1)
    config.task.length_buckets = (16,)
    init = workdirs["classification"]
    results = finetune(config, init, str(tmp_path / "again"))
    assert results["init"] == init
    assert results["init_from"] == f"zhlm checkpoint {os.path.join(init, 'best')}"
    assert results["fresh_parameters"] == []  # the encoder and the two-class head both taken
    assert "init_top_direction_share" in results


@pytest.mark.slow
@pytest.mark.parametrize("program", ["predict", "convert"])
def test_a_damaged_best_folder_is_one_line_naming_it(workdirs, tmp_path, program):
    workdir = tmp_path / "run"
    shutil.copytree(workdirs["classification"], workdir)
    cut_orbax(workdir / "best" / "params")
    text = tmp_path / "new.txt"
    text.write_text("房间很干净\n", encoding="utf-8")
    out = tmp_path / "out"
    flags = {
        "predict": [f"--workdir={workdir}", f"--input={text}", f"--output={out}.jsonl"],
        "convert": [f"--input={workdir}", f"--output={out}"],
    }[program]
    cmd = [sys.executable, "-m", f"zhlm.cli.{program}", *flags]
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"zhlm-{program}: {workdir}/best/params cannot be read ("), line
    assert "run zhlm-finetune with --overwrite" in line and "another checkpoint" in line
    assert not os.path.exists(f"{out}.jsonl") and not os.path.exists(out)


def test_a_cut_config_of_best_is_one_line_naming_the_file_and_the_way_forward(workdirs, tmp_path):
    best = tmp_path / "best"
    shutil.copytree(os.path.join(workdirs["classification"], "best"), best)
    config = best / "config.json"
    config.write_text(config.read_text()[:100])
    with pytest.raises(checkpoint.DamagedCheckpoint) as raised:
        saved.load_finetuned(str(best))
    (line,) = str(raised.value).splitlines()
    assert line.startswith(f"{config} cannot be read (JSONDecodeError: "), line
    assert line.endswith(checkpoint.REWRITE), line
