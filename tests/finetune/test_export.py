"""Task models against Hugging Face: the same outputs from an HF folder, the encoder the
pretraining model's, and the export back to each kind's HF class."""

import flax.linen as nn
import jax
import numpy as np
import pytest
from helpers import hf_folder

from zhlm import defaults
from zhlm.finetune import kinds, saved
from zhlm.finetune.saved import load_finetuned, save_finetuned
from zhlm.models import dummy_inputs
from zhlm.train import checkpoint

# ------------------------------------------------------------------------ HF parity


def _inputs(batch=3, length=16):
    rs = np.random.RandomState(0)
    ids = rs.randint(106, 21128, (batch, length)).astype(np.int32)
    types = np.zeros_like(ids)
    types[:, length // 2 :] = 1
    mask = np.ones_like(ids)
    mask[1, 10:] = 0
    return ids, types, mask


def _ours(path, kind, num_labels=2):
    config = defaults.get_finetune_config()
    config.task.kind = kind
    config.task.labels = tuple(str(i) for i in range(num_labels))
    loaded = checkpoint.load(path)
    checkpoint.adopt_model(config, loaded.config.model)
    model = kinds.task_model(config)
    fresh = saved.init_params(model, jax.random.key(1), dummy_inputs(16))
    merged, left_fresh = saved.merge(fresh, loaded.with_task_heads(), kinds.get(kind).export.head)
    return model, merged, left_fresh


def test_fine_tuning_takes_the_architecture_and_keeps_its_own_way_to_run():
    """The pretrained model's shape comes over; how to run it (checkpoint.RUNTIME_KEYS) stays the
    fine-tuning config's: a model pretrained with TPU flash kernels, bf16 and remat fine-tunes
    with the config's own settings (XLA attention on a CPU)."""
    source = defaults.get_finetune_config("tiny").model
    source.update(
        num_layers=3, hidden_size=96, dtype="bfloat16", remat="full", attention_impl="flash"
    )
    source.dropout_rng = "rbg"
    config = defaults.get_finetune_config("tiny")
    checkpoint.adopt_model(config, source)
    assert (config.model.num_layers, config.model.hidden_size) == (3, 96)
    for key in checkpoint.RUNTIME_KEYS:
        assert config.model[key] == defaults.get_finetune_config("tiny").model[key], key
    assert config.model.attention_impl == "xla" and config.model.dtype == "float32"


@pytest.mark.parametrize("kind", ["classification", "mrc", "ner"])
def test_a_task_models_encoder_is_the_pretraining_models(kind):
    """Same module names, shapes and dtypes as zhlm.models.Model for every reused part, and
    nothing of the pretraining heads (MLM, NSP/SOP) in the task model."""
    from zhlm.models import abstract_variables, build_model

    config = defaults.get_finetune_config("tiny")
    config.task.kind = kind
    config.model.sentence_head = "sop"
    task = nn.unbox(abstract_variables(kinds.task_model(config)))["params"]
    pretraining = nn.unbox(abstract_variables(build_model(config)))["params"]
    # Only the sentence classifier reads the pooled [CLS]: the others have no pooler to train.
    parts = saved.ENCODER_PARTS if kind == "classification" else ("embeddings", "encoder")
    assert set(task) == {*parts, kinds.get(kind).export.head}
    for part in parts:
        assert jax.tree.structure(task[part]) == jax.tree.structure(pretraining[part])
        for a, b in zip(
            jax.tree.leaves(task[part]), jax.tree.leaves(pretraining[part]), strict=True
        ):
            assert (a.shape, a.dtype) == (b.shape, b.dtype)


@pytest.mark.slow
def test_sequence_classifier_matches_hf(tmp_path):
    import torch

    hf, path = hf_folder(tmp_path, "BertForSequenceClassification", num_labels=3)
    model, params, left_fresh = _ours(path, "classification", num_labels=3)
    assert left_fresh == []  # encoder, pooler and the classifier all came from the folder
    ids, types, mask = _inputs()
    ours = model.apply({"params": params}, ids, types, mask)["logits"]
    with torch.no_grad():
        theirs = hf(*(torch.tensor(x, dtype=torch.long) for x in (ids, mask, types))).logits
    error = float(np.abs(np.asarray(ours) - theirs.numpy()).max())
    print(f"BertForSequenceClassification logits: max abs difference {error:.2e}")
    assert error < 1e-4, error


@pytest.mark.slow
def test_span_extractor_matches_hf(tmp_path):
    import torch

    hf, path = hf_folder(tmp_path, "BertForQuestionAnswering")
    model, params, left_fresh = _ours(path, "mrc")
    assert left_fresh == []
    ids, types, mask = _inputs()
    ours = model.apply({"params": params}, ids, types, mask)
    with torch.no_grad():
        theirs = hf(*(torch.tensor(x, dtype=torch.long) for x in (ids, mask, types)))
    for name in ("start_logits", "end_logits"):
        error = float(np.abs(np.asarray(ours[name]) - getattr(theirs, name).numpy()).max())
        print(f"BertForQuestionAnswering {name}: max abs difference {error:.2e}")
        assert error < 1e-4, (name, error)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["Bert", "Albert", "Ernie"])
def test_token_classifier_matches_hf_and_exports_back(tmp_path, family):
    """Each family's ``*ForTokenClassification`` loads with its head (nothing left fresh), gives
    HF's logits, and a fine-tuned model saved by zhlm exports back to that class: same logits,
    the tags named (id2label)."""
    import torch
    import transformers

    import zhlm

    architecture = f"{family}ForTokenClassification"
    tags = ("O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER")
    hf, path = hf_folder(tmp_path, architecture, family, num_labels=7)
    model, params, left_fresh = _ours(path, "ner", num_labels=7)
    assert left_fresh == []
    ids, types, mask = _inputs()
    ours = model.apply({"params": params}, ids, types, mask)["logits"]
    torch_inputs = [torch.tensor(x, dtype=torch.long) for x in (ids, mask, types)]
    with torch.no_grad():
        theirs = hf(*torch_inputs).logits
    error = float(np.abs(np.asarray(ours) - theirs.numpy()).max())
    print(f"{architecture} logits: max abs difference {error:.2e}")
    assert ours.shape == (3, 16, 7) and error < 1e-4, error

    config = defaults.get_finetune_config()
    config.task.update(kind="ner", labels=tags)
    checkpoint.adopt_model(config, checkpoint.load(path).config.model)
    best = save_finetuned(str(tmp_path / "best"), jax.device_get(params), config)
    model, params, config = load_finetuned(best)
    zhlm.to_hf(model, {"params": params}, config, str(tmp_path / "export"))
    exported = getattr(transformers, architecture).from_pretrained(str(tmp_path / "export"))
    assert exported.config.id2label == dict(enumerate(tags))
    with torch.no_grad():
        theirs = exported.eval()(*torch_inputs).logits
    error = float(np.abs(np.asarray(ours) - theirs.numpy()).max())
    print(f"{architecture} export: max abs difference {error:.2e}")
    assert error < 1e-4, error


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind,architecture",
    [
        ("pair", "BertForSequenceClassification"),
        ("ner", "BertForTokenClassification"),
        ("mrc", "BertForQuestionAnswering"),
    ],
)
def test_a_fine_tuned_model_exports_to_its_hf_class(tmp_path, kind, architecture):
    """save_finetuned -> zhlm-convert's to_hf -> transformers' from_pretrained: same logits,
    labels named (id2label)."""
    import torch
    import transformers

    import zhlm

    _, path = hf_folder(tmp_path, architecture, num_labels=3)
    model, params, _ = _ours(path, kind, num_labels=3)
    config = defaults.get_finetune_config()
    config.task.update(kind=kind, labels=("neg", "mid", "pos"))
    config.model.update(hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128, size="custom")
    best = save_finetuned(str(tmp_path / "best"), jax.device_get(params), config)
    model, params, config = load_finetuned(best)
    zhlm.to_hf(model, {"params": params}, config, str(tmp_path / "export"))
    hf = getattr(transformers, architecture).from_pretrained(str(tmp_path / "export")).eval()
    if kind != "mrc":
        assert hf.config.id2label == {0: "neg", 1: "mid", 2: "pos"}
    ids, types, mask = _inputs()
    ours = model.apply({"params": params}, ids, types, mask)
    with torch.no_grad():
        theirs = hf(*(torch.tensor(x, dtype=torch.long) for x in (ids, mask, types)))
    for name, value in ours.items():
        error = float(np.abs(np.asarray(value) - getattr(theirs, name).numpy()).max())
        print(f"{architecture} export {name}: max abs difference {error:.2e}")
        assert error < 1e-4, (name, error)


@pytest.mark.slow
def test_a_head_of_another_shape_is_trained_fresh(tmp_path):
    _, path = hf_folder(tmp_path, "BertForSequenceClassification", num_labels=3)
    _, _, left_fresh = _ours(path, "classification", num_labels=2)
    assert left_fresh == ["classifier"]


@pytest.mark.slow
def test_a_pair_model_exported_by_zhlm_convert_still_predicts_pairs(workdirs, tmp_path):
    """zhlm-convert's Hugging Face folder of a pair classifier reads back as a pair classifier
    (config.json's ``zhlm_task``): zhlm-predict with --text_fields=0,1 and zhlm.pipeline with
    a tuple give what the workdir gives. A folder without ``zhlm_task`` (written by
    transformers, or by an older zhlm) reads as before: one text, ``kind="pair"`` for two."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    from helpers import DATA, ROOT

    import zhlm
    from zhlm.finetune.predict import predict

    env = dict(os.environ, PYTHONPATH=ROOT)
    hf = tmp_path / "hf_pair"
    cmd = [sys.executable, "-m", "zhlm.cli.convert", f"--input={workdirs['pair']}"]
    done = subprocess.run([*cmd, f"--output={hf}"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((hf / "config.json").read_text())["zhlm_task"]["kind"] == "pair"
    with open(os.path.join(DATA, "lcqmc", "dev.txt"), encoding="utf-8") as f:
        pairs = [tuple(line.split("\t")[:2]) for line in f.read().splitlines()[:6]]
    inputs = tmp_path / "pairs.tsv"
    inputs.write_text("".join(f"{a}\t{b}\n" for a, b in pairs), encoding="utf-8")
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={hf}", f"--input={inputs}"]
    cmd += [f"--output={tmp_path / 'hf.jsonl'}", "--text_fields=0,1"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith(
        "6 predictions in " + str(tmp_path / "hf.jsonl") + ", one per input record"
    )
    predict(workdirs["pair"], str(inputs), str(tmp_path / "workdir.jsonl"), text_fields=(0, 1))
    ours, theirs = (
        [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
        for name in ("hf.jsonl", "workdir.jsonl")
    )
    assert [(r["text_a"], r["text_b"]) for r in ours] == pairs
    for a, b in zip(ours, theirs, strict=True):
        assert a["label"] == b["label"]
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    from_hf = zhlm.pipeline(str(hf))
    assert from_hf.inputs == ("text_a", "text_b") and from_hf.task.kind == "pair"
    result = from_hf(pairs[0])
    assert result["probabilities"] == pytest.approx(theirs[0]["probabilities"], abs=1e-5)

    older = tmp_path / "older"
    shutil.copytree(hf, older)
    config = json.loads((older / "config.json").read_text())
    del config["zhlm_task"]
    (older / "config.json").write_text(json.dumps(config))
    assert zhlm.pipeline(str(older)).inputs == ("text",)
    as_pair = zhlm.pipeline(str(older), kind="pair")(pairs[0])
    assert as_pair["probabilities"] == pytest.approx(theirs[0]["probabilities"], abs=1e-5)
