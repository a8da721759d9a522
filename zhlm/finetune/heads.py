"""Task models on the pretrained encoder, and how pretrained parameters fill them.

Each task model subclasses ``zhlm.models.Model`` and calls its ``encode`` and ``pooler``: the
embeddings, encoder and pooler are the pretraining model's modules under the same names, so a
pretrained tree drops in by construction (``tests/test_finetune.py`` checks the trees match).
Submodules defined in ``setup`` create parameters only when called, so the MLM decoder and
NSP/SOP, which fine-tuning never calls, have nothing to initialise or decay in vain. The heads
are named as in Hugging Face (``classifier``, ``qa_outputs``) and, like BERT's, are fresh unless
the init folder has them.

The numerics are those of ``BertForSequenceClassification`` (dropout on the pooled output, then
a Dense), ``BertForTokenClassification`` (dropout on every token, then a Dense) and
``BertForQuestionAnswering`` (a Dense(2) on every token, no dropout), which
``tests/test_finetune.py`` checks against transformers; so are the losses at the end
(``LOSSES``, one per task kind), which the fine-tuning step (:mod:`zhlm.finetune.train`) takes.
"""

from __future__ import annotations

import flax.linen as nn
import flax.traverse_util as traverse
import jax
import jax.numpy as jnp
import ml_collections
import optax

from zhlm.models import Model, dummy_inputs, model_config
from zhlm.models.layers import dense

# The parts of a pretrained tree a task model reuses.
ENCODER_PARTS = ("embeddings", "encoder", "pooler")
# Model keys that describe how to run, not what was trained: the fine-tuning config keeps its own.
RUNTIME_KEYS = ("dtype", "param_dtype", "remat", "dropout_rng", "attention_impl")


class SequenceClassifier(Model):
    """``{"logits": [B, num_labels]}`` from the pooled [CLS] state (sentence or pair tasks)."""

    num_labels: int = 2

    def setup(self):
        super().setup()
        self.dropout = nn.Dropout(self.config.dropout_rate)
        self.classifier = dense(self.config, self.num_labels, ("embed", "norm"), None)

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic)
        pooled = self.dropout(self.pooler(x), deterministic)
        return {"logits": self.classifier(pooled).astype(jnp.float32)}


class SpanExtractor(Model):
    """``{"start_logits", "end_logits"}`` [B,S] for span-extraction MRC. Raw scores: padding and
    question tokens are excluded by the loss and by the span search, not here."""

    def setup(self):
        super().setup()
        self.qa_outputs = dense(self.config, 2, ("embed", "norm"), None)

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic)
        logits = self.qa_outputs(x).astype(jnp.float32)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


class TokenClassifier(SequenceClassifier):
    """``{"logits": [B, S, num_labels]}``: a tag per token (NER), as
    ``BertForTokenClassification`` (dropout on the sequence output, then a Dense); the
    sentence classifier's modules, applied to every token instead of the pooled [CLS]."""

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic)
        return {"logits": self.classifier(self.dropout(x, deterministic)).astype(jnp.float32)}


def build_head(config: ml_collections.ConfigDict) -> nn.Module:
    """The task model for a fine-tuning config (``task.kind``, ``task.labels``, ``model``)."""
    cfg = model_config(config.model)
    if config.task.kind == "mrc":
        return SpanExtractor(cfg)
    if config.task.kind == "ner":
        return TokenClassifier(cfg, len(config.task.labels))
    return SequenceClassifier(cfg, len(config.task.labels))


def head_name(kind: str) -> str:
    return "qa_outputs" if kind == "mrc" else "classifier"


def init_params(model: nn.Module, rng, seq_len: int):
    """Fresh, unboxed parameters of a task model."""
    return nn.unbox(jax.jit(model.init)(rng, *dummy_inputs(seq_len)))["params"]


def adopt_model(config: ml_collections.ConfigDict, pretrained_model) -> None:
    """Sets ``config.model`` to the pretrained model's architecture, keeping the fine-tuning
    config's :data:`RUNTIME_KEYS` (compute dtype, rematerialisation, dropout's PRNG, attention
    kernels)."""
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


# Each loss gives, per row, a loss sum and how many targets it has, so that the step's loss is
# a mean over real targets: rows for classification and MRC, labelled tokens for NER (as
# BertForTokenClassification's mean over the tokens whose label is not ignored).


def classification_loss(outputs, batch):
    ce = optax.softmax_cross_entropy_with_integer_labels(outputs["logits"], batch["label"])
    return ce, jnp.ones_like(ce)


def span_loss(outputs, batch):
    """Mean of the start and end cross-entropies over the real tokens of each window."""
    real = batch["attention_mask"] > 0

    def cross_entropy(logits, target):
        logits = jnp.where(real, logits, -1e9)
        return optax.softmax_cross_entropy_with_integer_labels(logits, target)

    start = cross_entropy(outputs["start_logits"], batch["start_position"])
    loss = (start + cross_entropy(outputs["end_logits"], batch["end_position"])) / 2
    return loss, jnp.ones_like(loss)


def token_loss(outputs, batch):
    """Cross-entropy at the labelled tokens (``labels >= 0``: first pieces of words)."""
    labels = batch["labels"]
    real = (labels >= 0).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(outputs["logits"], jnp.maximum(labels, 0))
    return jnp.sum(ce * real, -1), jnp.sum(real, -1)


LOSSES = {
    "classification": classification_loss,
    "pair": classification_loss,
    "mrc": span_loss,
    "ner": token_loss,
}
