"""zhlm model and variables -> a Hugging Face folder that ``from_pretrained`` loads.

Writes ``config.json`` and ``model.safetensors`` through the same name tables the reader uses
(``zhlm.convert.layout``); what HF has no place for (SpanBERT's SBO head) is listed, not lost
silently.
"""

import dataclasses
import json
import os

import flax.linen as nn
import flax.traverse_util as traverse
import numpy as np
import safetensors.numpy

from zhlm.convert import tokenizer_files
from zhlm.convert.layout import FAMILIES, ConversionError, Report, task_head_rows, to_hf_layout
from zhlm.data.tokenizer import default_vocab
from zhlm.models import Model, fit_vocab


def _export_family(model: Model, config):
    """The HF family ``config.model.export_family`` names, checked against the architecture
    (empty: ALBERT for a factorised embedding, else BERT)."""
    cfg = model.config
    name = config.model.export_family or ("albert" if cfg.embed_dim else "bert")
    if name not in FAMILIES:
        raise ConversionError(
            f"config.model.export_family={name!r}; expected one of {', '.join(FAMILIES)}"
        )
    if name == "albert":
        if not cfg.embed_dim or cfg.share_layers != "all":
            raise ConversionError(
                f"share_layers={cfg.share_layers!r}, embed_dim={cfg.embed_dim}: no Hugging Face "
                "equivalent (ALBERT has a factorised embedding and shares whole layers)"
            )
    elif cfg.embed_dim or cfg.share_layers != "none":
        raise ConversionError(
            f"share_layers={cfg.share_layers!r}, embed_dim={cfg.embed_dim}: no Hugging Face "
            f"equivalent in the {name} family (factorised or shared layers are ALBERT's, with "
            "share_layers='all')"
        )
    return FAMILIES[name]


@dataclasses.dataclass(frozen=True)
class TaskExport:
    """How a fine-tuned task model is exported; its task kind (``zhlm.finetune.kinds``) says,
    so that this module stays below fine-tuning in the import graph."""

    suffix: str  # the HF architecture after the family, e.g. "ForSequenceClassification"
    head: str  # the head's name, the same in zhlm's task model and in HF
    config: dict  # extra config.json entries (id2label, label2id)


def _architecture(cfg, family, task: TaskExport | None):
    if task is not None:
        return family.architecture.replace("ForPreTraining", task.suffix)
    if cfg.sentence_head == "none":
        return family.architecture.replace("ForPreTraining", "ForMaskedLM")
    return family.architecture


def _hf_config(cfg, family, task: TaskExport | None):
    albert = family.model_type == "albert"
    out = dict(
        architectures=[_architecture(cfg, family, task)],
        model_type=family.model_type,
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.mlp_dim,
        hidden_act=cfg.hidden_act,
        hidden_dropout_prob=cfg.dropout_rate,
        attention_probs_dropout_prob=cfg.attention_dropout_rate,
        max_position_embeddings=cfg.max_position_embeddings,
        type_vocab_size=cfg.type_vocab_size,
        initializer_range=cfg.initializer_range,
        layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=0,
        position_embedding_type="absolute",
        tie_word_embeddings=True,
    )
    if albert:
        out.update(
            embedding_size=cfg.embed_dim,
            num_hidden_groups=cfg.num_groups,
            inner_group_num=cfg.inner_group_num,
        )
    if task is not None:
        out.update(task.config)
    return out


def to_hf(model: Model, variables, config, path, task: TaskExport | None = None, vocab: str = ""):
    """Writes ``config.json`` and ``model.safetensors`` that transformers' ``from_pretrained``
    loads: ``<Family>ForPreTraining`` (or ``ForMaskedLM``) for a pretraining model, and for a
    fine-tuned task model (``config`` with a ``task`` section) the ``<Family>`` + ``task.suffix``
    its kind names, with ``task.config`` (``zhlm.to_hf`` finds ``task`` from the config); and
    the tokenizer files (``zhlm.convert.tokenizer_files``) of ``vocab`` (empty: the config's
    vocabulary, else the Google Chinese one bundled in zhlm). Returns a ``Report`` naming what
    HF has no place for (SpanBERT's SBO head)."""
    if ("task" in config) != (task is not None):
        raise ConversionError(
            "a fine-tuned model exports with its task (zhlm.to_hf finds it from config.task); "
            "a pretraining model without one"
        )
    family = _export_family(model, config)
    cfg = model.config
    flat = traverse.flatten_dict(nn.unbox(variables)["params"], sep="/")
    flat = fit_vocab(flat, dataclasses.replace(cfg, vocab_multiple=1))  # HF: no padding rows
    rows = [row for row, _ in family.top(cfg.sentence_head)]
    if task is not None:  # the encoder (and pooler, where the task model has one) and its head
        rows = [r for r in rows if r[1] in flat and not r[1].startswith(("mlm/", "sentence"))]
        rows += task_head_rows(task.head)
    tensors = {hf: to_hf_layout(kind, flat[src]) for hf, src, kind in rows}
    for s, layer_rows in enumerate(family.layer_sets(cfg)):
        for hf, name, kind in layer_rows:
            tensors[hf] = to_hf_layout(kind, np.asarray(flat[f"encoder/layers/{name}"][s]))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(_hf_config(cfg, family, task), f, indent=2)
    safetensors.numpy.save_file(
        tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"}
    )
    report = Report(unused=sorted(p for p in flat if p.startswith("sbo/")))
    text = config.task if "task" in config else config.data
    if "task" not in config and config.data.tokenizer != "wordpiece":
        report.notes.append(
            f"no tokenizer files written: a {config.data.tokenizer} vocabulary has no BERT "
            "tokenizer in transformers"
        )
        return report
    named = vocab or text.vocab
    vocab = named or default_vocab()
    size = tokenizer_files.vocab_size(vocab)
    if size > cfg.vocab_size and named:
        raise ConversionError(
            f"{vocab}: {size} tokens, but the model has {cfg.vocab_size} word embeddings "
            "(export with the vocabulary it was trained with)"
        )
    if size > cfg.vocab_size:  # a model of its own size that names no vocabulary (tests)
        report.notes.append(
            f"no tokenizer files written: the model has {cfg.vocab_size} word embeddings and "
            "names no vocabulary"
        )
        return report
    tokenizer_files.write(path, vocab, text.lower_case, cfg.max_position_embeddings)
    return report
