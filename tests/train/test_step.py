"""The jitted train step: gradient accumulation learns, the pre-compile checks, and sharded runs
on 8 fake CPU devices equal the 1-device run. (Every recipe's loss falling on real text is
tests/train/test_loop.py.)"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import HELPERS_PATH, ROOT, load_config, synthetic_batch

from zhlm.train.step import make_trainer


def tiny_config(recipe="bert", batch=8, seq=32, steps=30):
    config = load_config(recipe, "tiny")
    config.train.batch_size, config.data.max_seq_length = batch, seq
    config.train.num_steps, config.optim.warmup_steps = steps, 2
    # LAMB steps are relative to each layer's norm, so it needs a larger rate in 12 steps.
    config.optim.peak_lr = 1e-2 if config.optim.name == "lamb" else 1e-3
    return config


def losses(config, steps, batch=None, mesh=None):
    trainer = make_trainer(config, mesh)
    state = trainer.init(jax.random.key(0))
    batch = (
        synthetic_batch(config.train.batch_size, config.data.max_seq_length)
        if batch is None
        else batch
    )
    out = []
    for _ in range(steps):
        state, metrics = trainer.step(state, batch, jax.random.key(1))
        out.append(float(metrics["total_loss_sum"] / metrics["total_count"]))
    return out, state


@pytest.mark.slow
def test_gradient_accumulation_runs_and_learns():
    config = tiny_config()
    config.train.micro_batches = 2
    values, _ = losses(config, 12)
    assert np.mean(values[-3:]) < np.mean(values[:3]) - 0.5, values


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("batch_size", 6, "not divisible by data"),
        ("micro_batches", 3, "not divisible by micro_batches"),
    ],
)
def test_impossible_batches_fail_before_compiling(key, value, match):
    config = tiny_config(batch=8)
    config.train[key] = value
    mesh = jax.sharding.Mesh(
        np.asarray(jax.devices()[:1] * 1).reshape(1, 1, 1), ("data", "fsdp", "tensor")
    )
    if key == "batch_size":
        # 6 sequences cannot be split over 4 data devices; checked without needing 4 devices.
        from zhlm.train import sharding

        fake = type("M", (), {"shape": {"data": 4, "fsdp": 1, "tensor": 1}})()
        with pytest.raises(ValueError, match=match):
            sharding.check_divisibility(
                config, fake, make_trainer(tiny_config(), mesh).model.config
            )
    else:
        with pytest.raises(ValueError, match=match):
            make_trainer(config, mesh)


def test_mesh_that_does_not_fit_the_devices():
    config = tiny_config()
    config.train.mesh = (("data", 3), ("fsdp", 1), ("tensor", 1))
    with pytest.raises(ValueError, match="needs 3 devices"):
        make_trainer(config)


SHARDED = r"""
import json, sys
sys.path[:0] = [{helpers!r}, {here!r}]  # helpers, and this test module
import jax, numpy as np
from test_step import tiny_config, losses
from zhlm.train import sharding
assert len(jax.devices()) == 8
out = {{}}
one_device = sharding.create_mesh(tiny_config(), jax.devices()[:1])
base, base_state = losses(tiny_config("{recipe}"), 3, mesh=one_device)
flat = lambda s: np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(s["params"])])
for shape in [(8, 1, 1), (2, 2, 2), (1, 4, 2)]:
    config = tiny_config("{recipe}")
    config.train.mesh = tuple(zip(("data", "fsdp", "tensor"), shape))
    values, state = losses(config, 3)
    out[str(shape)] = dict(loss=float(np.max(np.abs(np.array(values) - base))),
                           params=float(np.max(np.abs(flat(state) - flat(base_state)))))
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["bert", "albert", "spanbert"])
def test_sharded_equals_unsharded(recipe):
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    here = os.path.dirname(os.path.abspath(__file__))
    code = SHARDED.format(helpers=HELPERS_PATH, here=here, recipe=recipe)
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT")[-1])
    print(recipe, result)
    for shape, err in result.items():
        assert err["loss"] < 1e-5 and err["params"] < 1e-5, (shape, err)
