"""The contract every registered task kind keeps, run for each: a fine-tuning run of one epoch
on a small sample of its data (read, featurize, train, evaluate with the kind's metric, keep
``best/``), from random weights and from a Hugging Face ``--init`` (its encoder checked before
training, the head fresh), then ``zhlm-predict``'s records from ``best/`` (one per example, each
with its ``id``) and the Hugging Face export of its class (``Bert`` + ``kind.export.hf_class``)
giving the same outputs."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from helpers import ROOT, SAMPLES, hf_folder, read_task

import zhlm
from zhlm import defaults
from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune import batching, kinds, saved
from zhlm.finetune import train as train_lib
from zhlm.finetune.task_model import TaskModel

# Hugging Face's output names of each of zhlm's task model outputs.
HF_OUTPUTS = ("logits", "start_logits", "end_logits")


def test_every_registered_kind_has_a_sample():
    assert set(SAMPLES) == set(kinds.KINDS)


@pytest.fixture(scope="module")
def hf_init(tmp_path_factory):
    """A tiny random ``BertModel`` folder (no task head), what ``--init`` takes."""
    return hf_folder(tmp_path_factory.mktemp("init"), "BertModel")[1]


@pytest.mark.slow
@pytest.mark.parametrize("init", ["random", "hf"])
@pytest.mark.parametrize("name", sorted(kinds.KINDS))
def test_kind_contract(name, init, tmp_path, request):
    import torch
    import transformers

    fmt, write, overrides = SAMPLES[name]
    path = str(write(tmp_path))
    config = defaults.get_finetune_config("tiny")
    config.task.update(dict(kind=name, format=fmt, train_file=path, dev_file=path, **overrides))
    config.task.max_seq_length = overrides.get("max_seq_length", 32)
    config.task.length_buckets = (config.task.max_seq_length,)  # one program to compile
    config.train.update(batch_size=8, log_every=0, epochs=1)
    kind = kinds.get(name)
    source = request.getfixturevalue("hf_init") if init == "hf" else None
    results = train_lib.finetune(config, source, str(tmp_path / "run"))
    assert results["metric"] == kind.metric and np.isfinite(results["max"])
    assert results["train_rows"] > 0 and results["eval_examples"] > 0
    if source:  # the encoder is the folder's, checked before training; the head is fresh
        assert results["init_from"] == f"Hugging Face folder {source}"
        assert 0 < results["init_top_direction_share"] <= 1
        assert results["fresh_parameters"] == [kind.export.head]
    else:
        assert kind.export.head in results["fresh_parameters"]

    best = str(tmp_path / "run" / "best")
    model, saved_params, saved_config = saved.load_finetuned(best)
    task = saved_config.task
    _, evaluation, _ = read_task(task)
    tokenizer = WordPiece(default_vocab())
    records = TaskModel(kind, model, saved_params, saved_config, tokenizer).predict(evaluation)
    assert len(records) == len(evaluation) and all("id" in r for r in records)
    json.dumps(records, ensure_ascii=False)  # what zhlm-predict writes, a line each

    zhlm.to_hf(model, {"params": saved_params}, saved_config, str(tmp_path / "hf"))
    hf = getattr(transformers, "Bert" + kind.export.hf_class).from_pretrained(str(tmp_path / "hf"))
    evaluated = kind.featurize(evaluation, tokenizer, task, training=False)
    batch = {k: v[:4] for k, v in evaluated.arrays.items()}
    ours = jax.device_get(model.apply({"params": saved_params}, *batching.model_inputs(batch)))
    with torch.no_grad():
        ids, types, mask = (
            torch.tensor(np.asarray(x, np.int64)) for x in batching.model_inputs(batch)
        )
        theirs = hf.eval()(input_ids=ids, attention_mask=mask, token_type_ids=types)
    assert set(ours) <= set(HF_OUTPUTS)
    for out in ours:
        np.testing.assert_allclose(ours[out], theirs[out].numpy(), atol=1e-4, rtol=1e-4)


# Per kind, in a process with 8 CPU devices: two steps of the same batches and seed on a mesh of
# one device and on all eight; prints the task loss sums and counts of both.
STEPS_CHILD = """
import itertools, json, sys
import jax, numpy as np
from zhlm import defaults
from zhlm.data.tokenizer import WordPiece, default_vocab
from zhlm.finetune import batching, kinds, saved, task_files
from zhlm.finetune import train as train_lib
from zhlm.train import sharding
out = {}
for name, (fmt, path, overrides) in json.loads(sys.argv[1]).items():
    config = defaults.get_finetune_config("tiny")
    config.task.update(dict(kind=name, format=fmt, train_file=path, dev_file=path, **overrides))
    config.train.update(batch_size=8, log_every=0)
    kind, key = kinds.get(name), jax.random.key(0)
    train, _, _ = task_files.read_task(kind, config.task)
    tokenizer = WordPiece(default_vocab())
    examples = kind.training_examples(config.task, train)
    features = kind.featurize(examples, tokenizer, config.task, True)
    rows = np.arange(len(features.arrays["input_ids"]))
    assert len(jax.devices()) == 8
    for devices in (1, 8):
        mesh = sharding.create_mesh(config, jax.devices()[:devices])
        trainer = train_lib.task_trainer(config, kind, 2, mesh=mesh)
        params = saved.init_params(trainer.model, key, kind.example_inputs(config.task))
        state, losses = trainer.state_from(params), []
        for batch in itertools.islice(batching.batches(features.arrays, 8, rows), 2):
            state, metrics = trainer.step(state, batch, key)
            losses.append([float(metrics[f"task{k}"]) for k in ("_loss_sum", "_count")])
        out.setdefault(name, {})[devices] = losses
print("RESULTS" + json.dumps(out))
"""


@pytest.mark.slow
def test_every_kind_steps_the_same_on_one_and_eight_devices(tmp_path):
    """The state, mesh and shardings of every kind come from the pretraining step's builder:
    the batch split over 8 devices gives the losses of 1 device (as test_train's NER run)."""
    spec = {}
    for name, (fmt, write, overrides) in SAMPLES.items():
        folder = tmp_path / name
        folder.mkdir()
        spec[name] = (fmt, str(write(folder)), overrides)
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-c", STEPS_CHILD, json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.split("RESULTS")[-1])
    assert set(runs) == set(kinds.KINDS)
    for name, by_devices in runs.items():
        one, eight = np.asarray(by_devices["1"]), np.asarray(by_devices["8"])
        assert one.shape == (2, 2) and np.all(one[:, 1] > 0), name
        np.testing.assert_allclose(one, eight, rtol=1e-5, err_msg=name)
