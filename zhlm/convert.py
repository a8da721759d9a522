"""Hugging Face transformers <-> zhlm parameters, without torch.

Reads and writes the folders ``save_pretrained`` produces (``config.json`` plus
``model.safetensors`` or a sharded ``model.safetensors.index.json``) for ``BertForPreTraining``
(bert-base-chinese, hfl/chinese-roberta-wwm-ext, hfl/chinese-macbert-*, SpanBERT weights),
``BertForMaskedLM`` / ``BertModel``, ``ErnieForPreTraining`` and ``AlbertForPreTraining``.

The mapping is one table per family from HF tensor names to zhlm parameter paths, each entry with
the reshape that turns a torch ``[out, in]`` weight into our ``[in, (heads, head_dim) | out]``
kernel. Layer tensors are stacked into the encoder's parameter sets (see models/layers.py).
"""

import dataclasses
import json
import os

import flax.linen as nn
import flax.traverse_util as traverse
import jax
import ml_collections
import numpy as np
import safetensors
import safetensors.numpy

from zhlm import defaults
from zhlm.models import Model, build_model, init_variables


class ConversionError(ValueError):
    """A folder that cannot be converted; the message says why in full."""


@dataclasses.dataclass
class Report:
    """What a conversion did besides copying tensors: nothing is dropped without a line here."""

    fresh: list = dataclasses.field(default_factory=list)  # zhlm params initialised fresh
    unused: list = dataclasses.field(default_factory=list)  # source tensors not carried over

    def lines(self):
        out = [f"initialised fresh (not in the source): {p}" for p in self.fresh]
        return out + [f"not carried over: {p}" for p in self.unused]


# ----------------------------------------------------------------------------- name tables
# Each entry: (HF name, zhlm path, kind). Kinds say how the torch tensor is laid out:
#   copy: same layout; dense: torch Linear [out, in] -> kernel [in, out];
#   qkv: Linear [A*D, H] -> [H, A, D];  qkv_bias: [A*D] -> [A, D];  attn_out: [H, A*D] -> [A, D, H].
# {p} is the model prefix (bert, ernie, albert); layer entries are per parameter set.


def _embeddings(p):
    return [
        (f"{p}.embeddings.word_embeddings.weight", "embeddings/word_embeddings/embedding", "copy"),
        (
            f"{p}.embeddings.position_embeddings.weight",
            "embeddings/position_embeddings/embedding",
            "copy",
        ),
        (
            f"{p}.embeddings.token_type_embeddings.weight",
            "embeddings/token_type_embeddings/embedding",
            "copy",
        ),
        (f"{p}.embeddings.LayerNorm.weight", "embeddings/layer_norm/scale", "copy"),
        (f"{p}.embeddings.LayerNorm.bias", "embeddings/layer_norm/bias", "copy"),
    ]


def _dense(hf, path, kind="dense"):
    return [(f"{hf}.weight", f"{path}/kernel", kind), (f"{hf}.bias", f"{path}/bias", "copy")]


def _layer_norm(hf, path):
    return [(f"{hf}.weight", f"{path}/scale", "copy"), (f"{hf}.bias", f"{path}/bias", "copy")]


def _attention(q, k, v, out, ln):
    rows = []
    for hf, name in ((q, "query"), (k, "key"), (v, "value")):
        rows += [
            (f"{hf}.weight", f"{name}/kernel", "qkv"),
            (f"{hf}.bias", f"{name}/bias", "qkv_bias"),
        ]
    return (
        rows + _dense(out, "attention_output", "attn_out") + _layer_norm(ln, "attention_layer_norm")
    )


def _bert_layer(p, i):
    """HF tensor names of BERT/ERNIE layer i -> zhlm names inside encoder/layers (one set)."""
    b = f"{p}.encoder.layer.{i}"
    attn = _attention(
        *(f"{b}.attention.self.{n}" for n in ("query", "key", "value")),
        f"{b}.attention.output.dense",
        f"{b}.attention.output.LayerNorm",
    )
    return (
        attn
        + _dense(f"{b}.intermediate.dense", "intermediate")
        + _dense(f"{b}.output.dense", "output")
        + _layer_norm(f"{b}.output.LayerNorm", "output_layer_norm")
    )


def _albert_layer(g, k):
    b = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{k}"
    attn = _attention(
        *(f"{b}.attention.{n}" for n in ("query", "key", "value", "dense", "LayerNorm"))
    )
    return (
        attn
        + _dense(f"{b}.ffn", "intermediate")
        + _dense(f"{b}.ffn_output", "output")
        + (_layer_norm(f"{b}.full_layer_layer_norm", "output_layer_norm"))
    )


@dataclasses.dataclass(frozen=True)
class Family:
    """One HF model family: its prefix, config fields and how its tensors are named."""

    prefix: str
    model_type: str
    architecture: str

    def top(self, sentence_head: str):
        """Non-layer tensors: embeddings, pooler and heads, with the head each belongs to."""
        p = self.prefix
        if self.model_type == "albert":
            rows = [(r, "body") for r in _embeddings(p)]
            rows += [
                (r, "body")
                for r in _dense(f"{p}.encoder.embedding_hidden_mapping_in", "embeddings/projection")
            ]
            rows += [(r, "pooler") for r in _dense(f"{p}.pooler", "pooler/dense")]
            rows += [(r, "mlm") for r in _dense("predictions.dense", "mlm/transform")]
            rows += [(r, "mlm") for r in _layer_norm("predictions.LayerNorm", "mlm/layer_norm")]
            rows += [(("predictions.bias", "mlm/decoder/bias", "copy"), "mlm")]
            rows += [(r, "sentence") for r in _dense("sop_classifier.classifier", "sentence")]
        else:
            rows = [(r, "body") for r in _embeddings(p)]
            rows += [(r, "pooler") for r in _dense(f"{p}.pooler.dense", "pooler/dense")]
            rows += [(r, "mlm") for r in _dense("cls.predictions.transform.dense", "mlm/transform")]
            rows += [
                (r, "mlm")
                for r in _layer_norm("cls.predictions.transform.LayerNorm", "mlm/layer_norm")
            ]
            rows += [(("cls.predictions.bias", "mlm/decoder/bias", "copy"), "mlm")]
            rows += [(r, "sentence") for r in _dense("cls.seq_relationship", "sentence")]
        if sentence_head == "none":
            rows = [r for r in rows if r[1] != "sentence"]
        return rows

    def layer_sets(self, cfg):
        """For each parameter set of the encoder, the HF tensor names of that set."""
        if self.model_type == "albert":
            return [
                _albert_layer(g, k)
                for g in range(cfg.num_groups)
                for k in range(cfg.inner_group_num)
            ]
        return [_bert_layer(self.prefix, i) for i in range(cfg.num_layers)]

    def decoder_weight(self):
        return (
            "predictions.decoder.weight"
            if self.model_type == "albert"
            else "cls.predictions.decoder.weight"
        )


FAMILIES = {
    "bert": Family("bert", "bert", "BertForPreTraining"),
    "ernie": Family("ernie", "ernie", "ErnieForPreTraining"),
    "albert": Family("albert", "albert", "AlbertForPreTraining"),
}


def _hf_shape(kind, shape):
    """The torch shape of a tensor whose zhlm shape is ``shape``."""
    if kind == "copy":
        return tuple(shape)
    if kind == "dense":
        return tuple(shape[::-1])
    if kind == "qkv":  # [H, A, D]
        return (shape[1] * shape[2], shape[0])
    if kind == "qkv_bias":  # [A, D]
        return (shape[0] * shape[1],)
    if kind == "attn_out":  # [A, D, H]
        return (shape[2], shape[0] * shape[1])
    raise AssertionError(kind)


def _to_zhlm(kind, x, shape):
    return x.T.reshape(shape) if kind in ("dense", "qkv", "attn_out") else x.reshape(shape)


def _to_hf(kind, y):
    y = np.asarray(y, np.float32)
    return np.ascontiguousarray(
        y.reshape(-1, y.shape[-1]).T
        if kind == "attn_out"
        else y.reshape(y.shape[0], -1).T
        if kind == "qkv"
        else y.T
        if kind == "dense"
        else y.reshape(_hf_shape(kind, y.shape))
    )


# ------------------------------------------------------------------------------ reading

HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_new",
    "gelu_pytorch_tanh": "gelu_new",
    "relu": "relu",
}


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConversionError(f"{path}: not found (expected a Hugging Face model folder)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ConversionError(f"{path}: unreadable ({e})") from None


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
    return config


def _sizes():
    from zhlm.models.sizes import SIZES

    return SIZES


def _read_tensors(folder):
    """Every tensor of the folder as float32 numpy, single file or sharded index."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(_read_json(index)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for name in files:
        f = os.path.join(folder, name)
        if not os.path.exists(f):
            raise ConversionError(f"{f}: not found (only safetensors folders are read; no torch)")
        try:
            # The flax reader understands bfloat16/float16 files; numpy's does not.
            with safetensors.safe_open(f, framework="flax") as st:
                for key in st.keys():
                    tensors[key] = np.asarray(st.get_tensor(key), np.float32)
        except (OSError, safetensors.SafetensorError) as e:
            raise ConversionError(f"{f}: unreadable ({e})") from None
    return tensors


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


def read_hf(path, config=None, seed=0):
    """``(model, variables, config, report)`` from a Hugging Face folder.

    ``config`` (optional) supplies the recipe (heads, dtype, masking, ...); the model's
    dimensions always come from the folder. Heads missing from the folder are initialised fresh
    with ``seed`` and listed in the report; a missing encoder tensor or any shape mismatch
    raises ``ConversionError`` naming every offending tensor.
    """
    if not os.path.isdir(path):
        raise ConversionError(f"{path}: not a directory (expected a Hugging Face model folder)")
    hf_config = _read_json(os.path.join(path, "config.json"))
    family = _family(hf_config, path)
    try:
        config = _zhlm_config(hf_config, family, config)
        model = build_model(config)
    except (KeyError, ValueError) as e:
        raise ConversionError(f"{path}/config.json: {e}") from None
    cfg = model.config
    tensors = _normalise(_read_tensors(path), family)
    fresh = nn.unbox(init_variables(model, jax.random.key(seed)))["params"]
    flat = {k: np.array(v) for k, v in traverse.flatten_dict(fresh, sep="/").items()}
    errors, missing = [], {}

    def take(hf, kind, shape, head):
        """The converted tensor, or None (recorded as missing or as a mismatch)."""
        if hf not in tensors:
            missing.setdefault(head, []).append(hf)
            return None
        x = tensors.pop(hf)
        if x.shape != _hf_shape(kind, shape):
            errors.append(f"{hf}: shape {x.shape}, expected {_hf_shape(kind, shape)}")
            return None
        return _to_zhlm(kind, x, shape)

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
        raise ConversionError(f"{path}: cannot convert:\n  " + "\n  ".join(errors))
    report = Report(
        fresh=[p for head in missing for p in flat if p.startswith(_HEAD_PATHS[head])],
        unused=sorted(k for k in tensors if not k.endswith("position_ids")),
    )
    params = traverse.unflatten_dict({tuple(k.split("/")): v for k, v in flat.items()})
    variables = {"params": jax.tree_util.tree_map(jax.numpy.asarray, params)}
    return model, variables, config, report


_HEAD_PATHS = {"pooler": "pooler/", "mlm": "mlm/", "sentence": "sentence/"}


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


# ------------------------------------------------------------------------------ writing


def _export_family(model: Model, config):
    cfg = model.config
    if cfg.embed_dim:
        if cfg.share_layers != "all":
            raise ConversionError(
                f"share_layers={cfg.share_layers!r} with a factorised embedding has no Hugging "
                "Face equivalent (ALBERT shares whole layers)"
            )
        return FAMILIES["albert"]
    if cfg.share_layers != "none":
        raise ConversionError(
            f"share_layers={cfg.share_layers!r} without embed_dim has no Hugging Face equivalent"
        )
    return FAMILIES["ernie" if config.recipe == "ernie" else "bert"]


def _hf_config(cfg, family):
    albert = family.model_type == "albert"
    if cfg.sentence_head == "none":
        arch = family.architecture.replace("ForPreTraining", "ForMaskedLM")
    else:
        arch = family.architecture
    out = dict(
        architectures=[arch],
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
    return out


def to_hf(model: Model, variables, config, path):
    """Writes ``config.json`` and ``model.safetensors`` that transformers' ``from_pretrained``
    loads. Returns a ``Report`` naming what HF has no place for (SpanBERT's SBO head)."""
    family = _export_family(model, config)
    cfg = model.config
    flat = traverse.flatten_dict(nn.unbox(variables)["params"], sep="/")
    tensors = {}
    for (hf, src, kind), _ in family.top(cfg.sentence_head):
        tensors[hf] = _to_hf(kind, flat[src])
    for s, rows in enumerate(family.layer_sets(cfg)):
        for hf, name, kind in rows:
            tensors[hf] = _to_hf(kind, np.asarray(flat[f"encoder/layers/{name}"][s]))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(_hf_config(cfg, family), f, indent=2)
    safetensors.numpy.save_file(
        tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"}
    )
    return Report(unused=sorted(p for p in flat if p.startswith("sbo/")))
