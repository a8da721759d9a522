"""Task heads on the pretrained encoder, and the parameters they start from.

Why separate modules from ``zhlm.models.Model``: fine-tuning needs neither the MLM decoder nor
NSP/SOP, and a head model that owns only what it uses has nothing to initialise or decay in
vain. The encoder parts keep the pretraining names (``embeddings``, ``encoder``, ``pooler``), so
a pretrained tree drops in by name; the heads are named as in Hugging Face (``classifier``,
``qa_outputs``) and, like BERT's, are fresh unless the init folder has them.

The numerics are those of ``BertForSequenceClassification`` (dropout on the pooled output, then
a Dense) and ``BertForQuestionAnswering`` (a Dense(2) on every token, no dropout), which
``tests/test_finetune.py`` checks against transformers.
"""

from __future__ import annotations

import json
import os

import flax.linen as nn
import flax.traverse_util as traverse
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
import safetensors

from zhlm import defaults
from zhlm.models import abstract_variables, build_model, model_config
from zhlm.models.encoder import Encoder
from zhlm.models.heads import Pooler
from zhlm.models.layers import Embeddings, ModelConfig, dense

# The parts of a pretrained tree a head model reuses.
ENCODER_PARTS = ("embeddings", "encoder", "pooler")
# Model keys that describe how to run, not what was trained: the fine-tuning config keeps its own.
RUNTIME_KEYS = ("dtype", "param_dtype", "remat")


def _encode(cfg: ModelConfig, input_ids, token_type_ids, attention_mask, deterministic):
    """Sequence output [B,S,H], as ``Model.encode``, with the submodules named as there."""
    x = Embeddings(cfg, name="embeddings")(input_ids, token_type_ids, deterministic)
    return Encoder(cfg, name="encoder")(x, attention_mask, deterministic)


class SequenceClassifier(nn.Module):
    """``{"logits": [B, num_labels]}`` from the pooled [CLS] state (sentence or pair tasks)."""

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        cfg = self.config
        x = _encode(cfg, input_ids, token_type_ids, attention_mask, deterministic)
        pooled = nn.Dropout(cfg.dropout_rate)(Pooler(cfg, name="pooler")(x), deterministic)
        logits = dense(cfg, self.num_labels, ("embed", "norm"), "classifier")(pooled)
        return {"logits": logits.astype(jnp.float32)}


class SpanExtractor(nn.Module):
    """``{"start_logits", "end_logits"}`` [B,S] for span-extraction MRC. Raw scores: padding and
    question tokens are excluded by the loss and by the span search, not here."""

    config: ModelConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        cfg = self.config
        x = _encode(cfg, input_ids, token_type_ids, attention_mask, deterministic)
        logits = dense(cfg, 2, ("embed", "norm"), "qa_outputs")(x).astype(jnp.float32)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


def build_head(config: ml_collections.ConfigDict) -> nn.Module:
    """The head model for a fine-tuning config (``task.kind``, ``task.labels``, ``model``)."""
    cfg = model_config(config.model)
    if config.task.kind == "mrc":
        return SpanExtractor(cfg)
    return SequenceClassifier(cfg, len(config.task.labels))


def head_name(kind: str) -> str:
    return "qa_outputs" if kind == "mrc" else "classifier"


def init_params(model: nn.Module, rng, seq_len: int):
    """Fresh, unboxed parameters of a head model."""
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return nn.unbox(jax.jit(model.init)(rng, ids, ids, ids))["params"]


# ------------------------------------------------------------------ where parameters come from


def load_pretrained(init: str, seed: int = 0):
    """``(params, model_section, description)`` from ``init``: a zhlm parameter checkpoint, a
    zhlm-pretrain workdir (the newest checkpoint's parameters only) or a Hugging Face folder
    (whose ``classifier`` / ``qa_outputs`` tensors, if any, are kept for :func:`merge`)."""
    from zhlm import convert
    from zhlm.train import checkpoint

    if checkpoint.is_params_checkpoint(init):
        variables, config = checkpoint.load_params(init)
        return variables["params"], config.model, f"zhlm checkpoint {init}"
    if os.path.isdir(os.path.join(init, "checkpoints")):
        return _load_workdir(init)
    _, variables, config, _ = convert.read_hf(init, None, seed)
    params = dict(variables["params"], **_hf_heads(init))
    return params, config.model, f"Hugging Face folder {init}"


def _load_workdir(workdir: str):
    """The parameters of a pretraining workdir's latest step, restored alone (no optimizer)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{workdir}: pretraining workdir without {path}")
    with open(path, encoding="utf-8") as f:
        config = defaults.config_from_dict(json.load(f))
    options = ocp.CheckpointManagerOptions(read_only=True)
    with ocp.CheckpointManager(os.path.join(workdir, "checkpoints"), options=options) as mngr:
        step = mngr.latest_step()
        if step is None:
            raise FileNotFoundError(f"{workdir}/checkpoints: no checkpoint to start from")
        abstract = {"params": nn.unbox(abstract_variables(build_model(config)))["params"]}
        restore = ocp.args.PyTreeRestore(
            item=abstract,
            restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
            partial_restore=True,
        )
        state = mngr.restore(step, args=ocp.args.Composite(state=restore)).state
    params = jax.tree_util.tree_map(jnp.asarray, state["params"])
    return params, config.model, f"pretraining workdir {workdir} (step {step})"


def _hf_heads(folder: str) -> dict:
    """``classifier`` / ``qa_outputs`` of a ``BertFor*`` folder as zhlm Dense parameters."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
    else:
        weight_map = None
    heads = {}
    for name in ("classifier", "qa_outputs"):
        keys = (f"{name}.weight", f"{name}.bias")
        file = weight_map.get(keys[0]) if weight_map else "model.safetensors"
        path = os.path.join(folder, file or "")
        if not file or not os.path.isfile(path):
            continue
        with safetensors.safe_open(path, framework="flax") as st:
            if all(k in st.keys() for k in keys):
                weight, bias = (np.asarray(st.get_tensor(k), np.float32) for k in keys)
                heads[name] = {"kernel": jnp.asarray(weight.T), "bias": jnp.asarray(bias)}
    return heads


def adopt_model(config: ml_collections.ConfigDict, pretrained_model) -> None:
    """Sets ``config.model`` to the pretrained model's architecture, keeping the fine-tuning
    config's :data:`RUNTIME_KEYS` (compute dtype, rematerialisation)."""
    for key, value in pretrained_model.items():
        if key not in RUNTIME_KEYS:
            config.model[key] = value


def merge(fresh: dict, pretrained: dict, kind: str) -> tuple[dict, list[str]]:
    """``fresh`` with the :data:`ENCODER_PARTS` (and the task head, if the init has one of the
    right shape) replaced by ``pretrained``; returns the tree and the names left fresh. Any
    shape difference inside the encoder is an error naming the parameter."""
    out = dict(fresh)
    head = head_name(kind)
    for part in (*ENCODER_PARTS, head):
        if part not in fresh or part not in pretrained:
            continue
        new, old = traverse.flatten_dict(fresh[part]), traverse.flatten_dict(pretrained[part])
        mismatch = [
            "/".join((part, *k)) for k in new if k not in old or old[k].shape != new[k].shape
        ]
        if part == head and mismatch:
            continue  # e.g. a classifier for another label set: train a fresh one
        if mismatch:
            raise ValueError(f"pretrained parameters do not fit the model: {', '.join(mismatch)}")
        out[part] = traverse.unflatten_dict({k: jnp.asarray(old[k], new[k].dtype) for k in new})
    left_fresh = [part for part in out if out[part] is fresh[part]]
    return out, left_fresh
