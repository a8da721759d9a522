"""``train_and_evaluate``: every recipe pretrains on real text and its loss falls; exact resume
after SIGKILL; SIGTERM saves and exits; a non-finite loss stops with the last good checkpoint
kept; a corrupt checkpoint falls back to the previous one; ``init_from`` a Hugging Face folder;
two processes through ``jax.distributed`` equal one."""

import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import RECIPES, ROOT, load_config, tiny_hf

from zhlm.train import metrics, resume
from zhlm.train.loop import train_and_evaluate

CORPUS = os.path.join(ROOT, "zhlm", "resources", "peoples_daily_199801_sample.txt")
CHILD = os.path.join(ROOT, "tests", "train", "pretrain_child.py")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first ~60 KB of the bundled People's Daily sample (whole documents), cached once."""
    root = tmp_path_factory.mktemp("loop")
    text = open(CORPUS, encoding="utf-8").read()
    cut = text.index("\n\n", 60_000) + 2
    path = root / "corpus.txt"
    path.write_text(text[:cut], encoding="utf-8")
    return str(path)


def overrides(corpus, **kw):
    base = {
        "data.input": [corpus],
        "data.max_seq_length": 64,
        "train.batch_size": 8,
        "train.num_steps": 12,
        "train.log_every": 1,
        "train.eval_every": 6,
        "train.eval_examples": 16,
        "train.checkpoint_every": 4,
        "optim.warmup_steps": 2,
    }
    base.update(kw)
    return base


def make_config(recipe, values):
    config = load_config(recipe, "tiny")
    for key, value in values.items():
        section, name = key.split(".")
        config[section][name] = tuple(value) if isinstance(value, list) else value
    return config


def losses(workdir, split="train"):
    """Step -> loss, the last line written for each step (a resumed run rewrites some)."""
    return {line["step"]: line["loss"] for line in metrics.read(str(workdir), split)}


def child(spec, env=None):
    return subprocess.run(
        [sys.executable, CHILD, json.dumps(spec)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES)
def test_each_recipe_pretrains_and_its_loss_falls(recipe, corpus, tmp_path):
    values = overrides(corpus, **{"train.num_steps": 40, "train.eval_every": 20})
    values["train.log_every"] = 10
    train_and_evaluate(make_config(recipe, values), str(tmp_path))
    train = [line["loss"] for line in metrics.read(str(tmp_path))]
    evals = [line["loss"] for line in metrics.read(str(tmp_path), "eval")]
    assert len(train) == 4 and len(evals) == 2
    assert train[-1] < train[0] - 0.3, train  # from ln(21128) ~ 10 towards unigram loss
    assert evals[-1] < evals[0], evals
    line = metrics.read(str(tmp_path))[-1]
    for key in (
        "mlm_accuracy",
        "learning_rate",
        "grad_norm",
        "tokens_per_second",
        "tokens_per_sec",
    ):
        assert np.isfinite(line[key]), line
    assert os.listdir(tmp_path / "tensorboard")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert resume.manager(str(tmp_path), make_config(recipe, values)).latest_step() == 40


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The uninterrupted 12-step run, in a child process like the interrupted ones."""
    workdir = tmp_path_factory.mktemp("reference")
    run = child(dict(recipe="bert", workdir=str(workdir), overrides=overrides(corpus)))
    assert run.returncode == 0, run.stderr[-3000:]
    return losses(workdir), losses(workdir, "eval")


@pytest.mark.slow
def test_resume_after_sigkill_repeats_the_losses_bitwise(corpus, reference, tmp_path):
    spec = dict(recipe="bert", workdir=str(tmp_path), overrides=overrides(corpus))
    killed = child(dict(spec, signal_at=7, signal="KILL"))
    assert killed.returncode == -9, killed.stderr[-3000:]
    assert max(losses(tmp_path)) == 6  # it got as far as step 6, past the checkpoint at 4
    resumed = child(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from checkpoint at step 4" in resumed.stdout
    assert losses(tmp_path) == reference[0]  # exact float equality, every step
    assert losses(tmp_path, "eval") == reference[1]


@pytest.mark.slow
def test_sigterm_saves_the_current_step_and_exits_cleanly(corpus, reference, tmp_path):
    spec = dict(recipe="bert", workdir=str(tmp_path), overrides=overrides(corpus))
    stopped = child(dict(spec, signal_at=6, signal="TERM"))
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    config = make_config("bert", overrides(corpus))
    assert resume.manager(str(tmp_path), config).all_steps() == [4, 6]
    resumed = child(spec)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "from checkpoint at step 6" in resumed.stdout
    assert losses(tmp_path) == reference[0]


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(corpus, tmp_path):
    values = overrides(corpus, **{"train.checkpoint_every": 1, "optim.peak_lr": 1e30})
    values.update({"optim.clip_norm": 0.0, "optim.warmup_steps": 0})
    config = make_config("bert", values)
    with pytest.raises(FloatingPointError, match=r"at step (\d+): stopping") as err:
        train_and_evaluate(config, str(tmp_path))
    bad = int(str(err.value).split("at step ")[1].split(":")[0])
    kept = resume.manager(str(tmp_path), config).all_steps()
    assert kept and max(kept) == bad - 1, (kept, str(err.value))
    assert f"checkpoint is kept (step {bad - 1})" in str(err.value)


@pytest.mark.slow
def test_corrupt_latest_checkpoint_falls_back_to_the_previous(corpus, tmp_path, caplog):
    values = overrides(corpus, **{"train.num_steps": 8, "train.eval_every": 0})
    config = make_config("bert", values)
    first = train_and_evaluate(config, str(tmp_path))
    latest = tmp_path / "checkpoints" / "8"
    for root, _, files in os.walk(latest):
        for name in files:
            with open(os.path.join(root, name), "r+b") as f:
                f.truncate(max(os.path.getsize(f.name) // 3, 1))
    again = train_and_evaluate(config, str(tmp_path))  # restores step 4, trains 5..8 again
    assert "checkpoint 8" in caplog.text and "cannot be restored" in caplog.text
    assert (tmp_path / "checkpoints" / "corrupt-8").is_dir()
    for a, b in zip(
        jax.tree_util.tree_leaves(first["params"]),
        jax.tree_util.tree_leaves(again["params"]),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_step_broken_twice_is_moved_aside_twice(tmp_path):
    """A run that resumed from step 4 and broke step 8 again: the second copy goes beside the
    first (``corrupt-8.1``) instead of failing the rename."""

    class Manager:  # what _move_aside uses of an orbax CheckpointManager
        directory = tmp_path
        reloads = 0

        def reload(self):
            self.reloads += 1

    mngr = Manager()
    for expected in ("corrupt-8", "corrupt-8.1", "corrupt-8.2"):
        (tmp_path / "8").mkdir()
        (tmp_path / "8" / "state").write_text(expected)
        resume._move_aside(mngr, 8)
        assert not (tmp_path / "8").exists()
        assert (tmp_path / expected / "state").read_text() == expected
    assert mngr.reloads == 3


@pytest.mark.slow
def test_init_from_a_hugging_face_folder(corpus, tmp_path):
    from zhlm import convert
    from zhlm.train.step import make_trainer

    config = make_config("bert", overrides(corpus))
    tiny_hf(
        "BertForPreTraining", hidden_size=128, intermediate_size=512, max_position_embeddings=512
    ).save_pretrained(tmp_path / "hf")
    config.train.init_from = str(tmp_path / "hf")
    trainer = make_trainer(config)
    mngr = resume.manager(str(tmp_path / "work"), config)
    loader = type("L", (), {"set_state": lambda self, s: None})()
    state, where = resume.restore_or_init(mngr, trainer, loader, config)
    assert where == f"parameters of {tmp_path / 'hf'}"
    _, variables, _, _ = convert.read_hf(str(tmp_path / "hf"), config)
    for a, b in zip(
        jax.tree_util.tree_leaves(variables["params"]),
        jax.tree_util.tree_leaves(state["params"]),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    config.model.size = "mini"  # H=256: the folder's H=128 tensors do not fit
    with pytest.raises(ValueError, match="do not fit config.model"):
        resume.restore_or_init(mngr, make_trainer(config), loader, config)


@pytest.mark.slow
def test_init_from_is_evaluated_at_step_0_and_the_run_ends_with_a_summary(corpus, tmp_path, capsys):
    """The step-0 evaluation of a run from ``init_from`` a pretraining workdir is that workdir's
    last evaluation (the same parameters on the same held-out batches): the init took."""
    values = overrides(corpus, **{"train.num_steps": 4, "train.eval_every": 4})
    train_and_evaluate(make_config("bert", values), str(tmp_path / "first"))
    config = make_config("bert", values)
    config.train.init_from = str(tmp_path / "first")
    train_and_evaluate(config, str(tmp_path / "second"))
    first = metrics.read(str(tmp_path / "first"), "eval")
    second = metrics.read(str(tmp_path / "second"), "eval")
    assert [line["step"] for line in second] == [0, 4]
    assert second[0]["loss"] == first[-1]["loss"]
    out = capsys.readouterr().out
    assert "zhlm: eval at step 0: loss " in out and "zhlm: eval at step 4: loss " in out
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("zhlm: finished at step 4 of 4 in "), summary
    assert "last train loss" in summary and "last eval loss" in summary, summary


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one(corpus, reference, tmp_path):
    """Two processes (one CPU device each) through jax.distributed, 4 rows of every batch each,
    against the one-process run of the same 12 steps."""
    port = _free_port()
    values = overrides(corpus, **{"train.distributed": True, "train.num_processes": 2})
    values["train.coordinator_address"] = f"localhost:{port}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                CHILD,
                json.dumps(
                    dict(
                        recipe="bert",
                        workdir=str(tmp_path),
                        overrides=dict(values, **{"train.process_id": i}),
                    )
                ),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err[-3000:]
    two, one = losses(tmp_path), reference[0]
    assert sorted(two) == sorted(one)
    np.testing.assert_allclose([two[s] for s in sorted(two)], [one[s] for s in sorted(one)],
                               rtol=0, atol=1e-5)  # fmt: skip


@pytest.mark.slow
def test_the_command_on_the_bundled_corpus(corpus, tmp_path):
    """README's main job, shortened: zhlm-pretrain with no data options."""
    cmd = [sys.executable, "-m", "zhlm.cli.pretrain", "--config=configs/macbert.py:tiny"]
    cmd += [f"--workdir={tmp_path}", "--config.train.num_steps=20", "--config.train.log_every=10"]
    cmd += ["--config.optim.warmup_steps=2", "--config.train.batch_size=8"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "macbert from fresh initialisation" in run.stdout
    assert [line["step"] for line in metrics.read(str(tmp_path))] == [10, 20]
    config = json.load(open(tmp_path / "config.json"))
    assert config["data"]["input"] == [] and config["train"]["num_steps"] == 20
    bad = subprocess.run(
        cmd[:-4] + ["--config.data.data_dir=/nonexistent"], capture_output=True, text=True,
        cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert bad.returncode == 1 and "no prepared dataset at /nonexistent" in bad.stderr
    assert "Traceback" not in bad.stderr
