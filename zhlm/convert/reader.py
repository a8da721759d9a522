"""Hugging Face folder -> zhlm model, variables and config.

Reads the folders ``save_pretrained`` produces (``config.json`` plus ``model.safetensors`` or a
sharded ``model.safetensors.index.json``; ``pytorch_model.bin``, ``flax_model.msgpack``,
``tf_model.h5`` and TF1 checkpoints too, through ``formats``) for ``BertForPreTraining``
(bert-base-chinese, hfl/chinese-roberta-wwm-ext, hfl/chinese-macbert-*, SpanBERT weights),
``BertForMaskedLM`` / ``BertModel``, ``ErnieForPreTraining`` and ``AlbertForPreTraining``
(torch only for ``.bin``). Every tensor is accounted for: converted, initialised fresh (a head
the folder lacks) or listed as not carried over; a missing encoder tensor or a shape mismatch
is an error naming each one.
"""

import dataclasses

import flax.linen as nn
import flax.traverse_util as traverse
import jax
import ml_collections
import numpy as np

from zhlm import defaults
from zhlm.convert import formats
from zhlm.convert.layout import (
    FAMILIES,
    TASK_HEADS,
    ConversionError,
    Report,
    hf_shape,
    task_head_rows,
    to_zhlm,
)
from zhlm.models import build_model, fit_vocab, init_variables

HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_new",
    "relu": "relu",
}


def _family(hf_config, path):
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise ConversionError(
            f"{path}: model_type {model_type!r} is not supported (supported: {', '.join(FAMILIES)})"
        )
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{path}: only absolute position embeddings are supported")
    if hf_config.get("use_task_id"):
        raise ConversionError(f"{path}: ERNIE task-type embeddings (use_task_id) are not supported")
    return FAMILIES[model_type]


def _zhlm_config(hf, family, base):
    """The zhlm config for HF ``config.json`` contents: dimensions from HF, recipe from ``base``."""
    config = (
        defaults.get_base_config() if base is None else ml_collections.ConfigDict(base.to_dict())
    )
    if base is None:
        config.recipe = family.model_type
        config.model.sentence_head = "sop" if family.model_type == "albert" else "nsp"
    act = hf.get("hidden_act", "gelu_new" if family.model_type == "albert" else "gelu")
    if act not in HF_ACTIVATIONS:
        raise ConversionError(f"hidden_act {act!r} is not supported ({', '.join(HF_ACTIVATIONS)})")
    m = config.model
    m.num_layers, m.hidden_size = hf["num_hidden_layers"], hf["hidden_size"]
    m.num_heads, m.mlp_dim = hf["num_attention_heads"], hf["intermediate_size"]
    m.size = next(
        (
            n
            for n, d in _sizes().items()
            if d == dict(num_layers=m.num_layers, hidden_size=m.hidden_size, num_heads=m.num_heads)
        ),
        "custom",
    )
    m.vocab_size, m.type_vocab_size = hf["vocab_size"], hf.get("type_vocab_size", 2)
    m.max_position_embeddings = hf.get("max_position_embeddings", 512)
    m.hidden_act, m.layer_norm_eps = HF_ACTIVATIONS[act], float(hf.get("layer_norm_eps", 1e-12))
    m.dropout_rate = float(hf.get("hidden_dropout_prob", 0.1))
    m.attention_dropout_rate = float(hf.get("attention_probs_dropout_prob", 0.1))
    m.initializer_range = float(hf.get("initializer_range", 0.02))
    albert = family.model_type == "albert"
    m.embed_dim = hf.get("embedding_size", 128) if albert else 0
    m.share_layers = "all" if albert else "none"
    m.num_groups = hf.get("num_hidden_groups", 1) if albert else 1
    m.inner_group_num = hf.get("inner_group_num", 1) if albert else 1
    m.export_family = family.model_type
    return config


def _sizes():
    from zhlm.models.sizes import SIZES

    return SIZES


def _normalise(tensors, family):
    """Old TF-converted names (gamma/beta) and prefix-less BertModel folders."""
    out = {}
    bare = not any(k.startswith(family.prefix + ".") for k in tensors)
    for key, value in tensors.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias"
        )
        if bare and key.split(".")[0] in ("embeddings", "encoder", "pooler"):
            key = f"{family.prefix}.{key}"
        out[key] = value
    return out


def read_hf(path, config=None, seed=0, fresh_heads=True):
    """``(model, variables, config, report)`` from a Hugging Face folder.

    ``config`` (optional) supplies the recipe (heads, dtype, masking, ...); the model's
    dimensions always come from the folder. Heads missing from the folder are initialised fresh
    with ``seed`` and listed in the report, or, without ``fresh_heads``, left out of the tree
    (a caller that uses none of them, such as prediction, then compiles no initialiser); a
    missing encoder tensor or any shape mismatch raises ``ConversionError`` naming every
    offending tensor.
    """
    source = formats.read_source(path)
    family = _family(source.hf_config, path)
    try:
        config = _zhlm_config(source.hf_config, family, config)
        model = build_model(config)
    except (KeyError, ValueError) as e:
        raise ConversionError(f"{path}: its config: {e}") from None
    if source.vocab and "data" in config:  # the folder's vocab.txt is the model's tokenizer
        config.data.vocab, config.data.tokenizer = source.vocab, "wordpiece"
    cfg = model.config
    tensors = _normalise(source.tensors, family)
    # Shapes first: every tensor the folder has overwrites its zeros; only missing heads need
    # the initialiser, a program that takes seconds to compile.
    shapes = jax.eval_shape(lambda: nn.unbox(init_variables(model, jax.random.key(seed))))
    shapes = traverse.flatten_dict(shapes["params"], sep="/")
    flat = {k: np.zeros(v.shape, v.dtype) for k, v in shapes.items()}
    flat = fit_vocab(flat, dataclasses.replace(cfg, vocab_multiple=1))  # HF's rows, no padding
    errors, missing = [], {}

    def take(hf, kind, shape, head):
        """The converted tensor, or None (recorded as missing or as a mismatch)."""
        if hf not in tensors:
            missing.setdefault(head, []).append(hf)
            return None
        x = tensors.pop(hf)
        if x.shape != hf_shape(kind, shape):
            errors.append(f"{hf}: shape {x.shape}, expected {hf_shape(kind, shape)}")
            return None
        return to_zhlm(kind, x, shape)

    for (hf, dst, kind), head in family.top(cfg.sentence_head):
        y = take(hf, kind, flat[dst].shape, head)
        if y is not None:
            flat[dst] = y
    for s, rows in enumerate(family.layer_sets(cfg)):
        for hf, name, kind in rows:
            dst = f"encoder/layers/{name}"
            y = take(hf, kind, flat[dst].shape[1:], "body")
            if y is not None:
                flat[dst][s] = y
    _check_tied(tensors, family, flat, errors)
    errors += [f"{hf}: missing from the folder" for hf in missing.pop("body", [])]
    if errors:
        more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
        raise ConversionError(
            f"{path}: cannot convert ({'; '.join(errors[:3])}{more}): check that its weights "
            "are whole and of the model its config.json describes"
        )
    heads = _task_heads(tensors)
    fresh = [p for head in missing for p in flat if p.startswith(_HEAD_PATHS[head])]
    if fresh and fresh_heads:
        initialised = nn.unbox(init_variables(model, jax.random.key(seed)))["params"]
        initialised = traverse.flatten_dict(initialised, sep="/")
        initialised = fit_vocab(initialised, dataclasses.replace(cfg, vocab_multiple=1))
        flat.update({p: np.array(initialised[p]) for p in fresh})
    elif fresh:
        flat = {k: v for k, v in flat.items() if k not in fresh}
    report = Report(
        fresh=fresh,
        unused=sorted(k for k in tensors if not k.endswith("position_ids")),
        task_heads=heads,
        format=source.format,
        ignored=source.ignored,
        notes=source.notes,
    )
    flat = fit_vocab(flat, cfg)  # the padding rows back, as zeros
    params = traverse.unflatten_dict({tuple(k.split("/")): v for k, v in flat.items()})
    # device_put, not jnp.asarray: that compiles a program for every shape (jax.lax.stage)
    variables = {"params": jax.device_put(params)}
    return model, variables, config, report


_HEAD_PATHS = {"pooler": "pooler/", "mlm": "mlm/", "sentence": "sentence/"}


def _task_heads(tensors):
    """The task heads present in full, taken out of ``tensors`` as zhlm Dense parameters."""
    heads = {}
    for name in TASK_HEADS:
        rows = task_head_rows(name)
        if all(hf in tensors for hf, _, _ in rows):
            heads[name] = {}
            for hf, dst, kind in rows:
                x = tensors.pop(hf)
                heads[name][dst.split("/")[-1]] = to_zhlm(
                    kind, x, x.T.shape if kind == "dense" else x.shape
                )
    return heads


def _check_tied(tensors, family, flat, errors):
    """A stored decoder must be the tied embedding (zhlm ties it); its bias the output bias."""
    weight = tensors.pop(family.decoder_weight(), None)
    if weight is not None and not np.array_equal(
        weight, flat["embeddings/word_embeddings/embedding"]
    ):
        errors.append(
            f"{family.decoder_weight()}: differs from the word embeddings (untied decoder)"
        )
    bias_name = family.decoder_weight().replace(".weight", ".bias")
    bias = tensors.pop(bias_name, None)
    if bias is not None and not np.array_equal(bias, flat["mlm/decoder/bias"]):
        errors.append(f"{bias_name}: differs from the output bias")


def from_hf(path, config=None, seed=0):
    """``(model, variables, config)`` from a Hugging Face folder; see ``read_hf``."""
    model, variables, config, report = read_hf(path, config, seed)
    for line in report.lines():
        print(f"zhlm.from_hf: {line}")
    return model, variables, config
