"""Every checkpoint format Chinese models are published in, read into one shape.

Many Chinese model folders carry only ``pytorch_model.bin`` (often with ``tf_model.h5`` or
``flax_model.msgpack`` beside it), and the original releases (Google's Chinese BERT and ALBERT,
the whole-word-masking and MacBERT TF versions) are TF1 checkpoints. ``read_source`` picks the
first format a folder holds (safetensors first: it needs nothing extra and runs no code) and
maps that format's own tensor names onto the Hugging Face PyTorch names the name tables in
``layout`` use, so every check the reader makes applies to all formats alike.

Formats and what reads them: ``model.safetensors`` (safetensors), ``pytorch_model.bin`` (torch,
``weights_only``: a checkpoint never runs code), ``flax_model.msgpack`` (flax), ``tf_model.h5``
(h5py) and TF1 ``*.ckpt.index`` + ``.data-*`` (TensorFlow's checkpoint reader). torch, h5py and
TensorFlow are optional extras, imported only for their format.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re

import numpy as np

from zhlm.convert import tokenizer_files
from zhlm.convert.layout import ConversionError

TF1_CONFIGS = ("bert_config.json", "albert_config.json", "config.json")


@dataclasses.dataclass
class Source:
    """A model folder's contents in Hugging Face PyTorch terms, whatever its format."""

    hf_config: dict  # config.json keys, with model_type
    tensors: dict  # HF PyTorch name -> float32 numpy array
    format: str  # short name for reports: safetensors, pytorch, flax, tf2-h5, tf1
    ignored: list = dataclasses.field(default_factory=list)  # dropped on purpose (optimizer)
    notes: list = dataclasses.field(default_factory=list)  # how the source was interpreted
    vocab: str | None = None  # the folder's WordPiece vocabulary, if any


def read_source(folder: str) -> Source:
    """The first format ``folder`` holds, read; ``ConversionError`` naming what was looked for
    when it holds none, and when its ``vocab.txt`` disagrees with the word embedding."""
    if not os.path.isdir(folder):
        raise ConversionError(f"{folder}: not a directory (expected a model folder)")
    for _, present, read in _FORMATS:
        if present(folder):
            source = read(folder)
            break
    else:
        looked = ", ".join(name for name, _, _ in _FORMATS)
        raise ConversionError(f"{folder}: no model weights found (looked for {looked})")
    source.vocab = _vocab(folder, source.tensors)
    return source


# ----------------------------------------------------------------------------- helpers


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConversionError(f"{path}: not found (expected beside the weights)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ConversionError(f"{path}: unreadable ({e})") from None


def _shards(folder, single):
    """The weight files of a single-file or sharded (``<single>.index.json``) checkpoint."""
    index = os.path.join(folder, single + ".index.json")
    if not os.path.exists(index):
        return [os.path.join(folder, single)]
    names = sorted(set(_read_json(index)["weight_map"].values()))
    files = [os.path.join(folder, n) for n in names]
    for f in files:
        if not os.path.exists(f):
            raise ConversionError(f"{f}: not found (named by {index})")
    return files


def _has(*names):
    return lambda folder: any(os.path.exists(os.path.join(folder, n)) for n in names)


def _float32(x):
    return np.asarray(x, np.float32)


def _vocab(folder, tensors):
    """The folder's vocabulary file, checked against the word embedding's rows."""
    path = tokenizer_files.find_vocab(folder)
    embedding = next((k for k in tensors if k.endswith("embeddings.word_embeddings.weight")), None)
    if path is None or embedding is None:
        return path
    size = tokenizer_files.vocab_size(path)
    rows = tensors[embedding].shape[0]
    if size != rows:
        raise ConversionError(
            f"{path}: {size} tokens, but {embedding} has {rows} rows (the vocabulary is not "
            "the one the model was trained with)"
        )
    return path


def _hf_config(folder):
    return _read_json(os.path.join(folder, "config.json"))


# ----------------------------------------------------------------------------- safetensors


def _read_safetensors(folder):
    import safetensors

    tensors = {}
    for f in _shards(folder, "model.safetensors"):
        try:
            # numpy's reader, which compiles nothing (the flax one compiles a program a shape),
            # except for bfloat16, which numpy lacks and the flax reader understands.
            with safetensors.safe_open(f, framework="np") as st:
                keys = list(st.keys())
                wide = [key for key in keys if st.get_slice(key).get_dtype() != "BF16"]
                tensors.update({key: _float32(st.get_tensor(key)) for key in wide})
            if len(wide) < len(keys):
                with safetensors.safe_open(f, framework="flax") as st:
                    for key in st.keys():
                        tensors.setdefault(key, _float32(st.get_tensor(key)))
        except (OSError, safetensors.SafetensorError) as e:
            raise ConversionError(f"{f}: unreadable ({e})") from None
    return Source(_hf_config(folder), tensors, "safetensors")


# ----------------------------------------------------------------------------- pytorch .bin

TORCH_MISSING = (
    "reading pytorch_model.bin needs torch: install its CPU build, then pip install "
    "'zhlm[torch]' (see README)"
)


def _read_torch(folder):
    try:
        import torch
    except ImportError:
        raise ConversionError(f"{folder}: {TORCH_MISSING}") from None
    tensors = {}
    for f in _shards(folder, "pytorch_model.bin"):
        try:
            # weights_only: unpickling anything but tensors and plain containers is refused,
            # so a checkpoint can never run code.
            state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises UnpicklingError, RuntimeError, EOFError, ...
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConversionError(f"{f}: refused or unreadable ({first})") from None
        if not isinstance(state, dict):
            raise ConversionError(f"{f}: holds a {type(state).__name__}, not a state dict")
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                raise ConversionError(f"{f}: {key} is a {type(value).__name__}, not a tensor")
            tensors[key] = value.detach().to(torch.float32).numpy()
    return Source(_hf_config(folder), tensors, "pytorch")


# ----------------------------------------------------------------------------- flax msgpack
# HF's Flax models name parameters by the same module paths as PyTorch ("layer/0", not
# "layer_0"); only the leaves differ: Dense kernels are [in, out], LayerNorm weights "scale",
# embedding tables "embedding".

_FLAX_LEAVES = {"kernel": ("weight", True), "scale": ("weight", False)}
_FLAX_LEAVES["embedding"] = ("weight", False)


def _read_flax(folder):
    import flax.serialization
    import flax.traverse_util as traverse

    path = os.path.join(folder, "flax_model.msgpack")
    try:
        with open(path, "rb") as f:
            tree = flax.serialization.msgpack_restore(f.read())
    except Exception as e:  # msgpack raises its own ExtraData, ValueError, ...
        raise ConversionError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    tensors = {}
    for keys, value in traverse.flatten_dict(tree).items():
        leaf, transpose = _FLAX_LEAVES.get(keys[-1], (keys[-1], False))
        x = _float32(value)
        tensors[".".join((*keys[:-1], leaf))] = x.T if transpose and x.ndim == 2 else x
    return Source(_hf_config(folder), tensors, "flax")


# ----------------------------------------------------------------------------- TF2 Keras h5
# What HF's TF models save: datasets "<layer>/<model>/<path>:0"; "X___Y" scopes stand for Y
# (mlm___cls -> cls), "name_._3" for list item 3; kernels are [in, out], LayerNorm weights
# gamma/beta, position/token-type tables "embeddings" and the word table "weight".

_TF2_LEAVES = {"kernel": ("weight", True), "gamma": ("weight", False)}
_TF2_LEAVES.update(embeddings=("weight", False), beta=("bias", False))


def _tf2_name(name):
    name = re.sub(r"/[^/]*___([^/]*)/", r"/\1/", name.removesuffix(":0"))
    parts = re.sub(r"//+", "/", name.replace("_._", "/")).split("/")
    parts = parts[1:] if len(parts) > 1 else parts  # drop the model name
    leaf, transpose = _TF2_LEAVES.get(parts[-1], (parts[-1], False))
    return ".".join((*parts[:-1], leaf)), transpose


def _read_h5(folder):
    try:
        import h5py
    except ImportError:
        raise ConversionError(
            f"{folder}: reading tf_model.h5 needs h5py: pip install 'zhlm[h5]'"
        ) from None
    path = os.path.join(folder, "tf_model.h5")
    found, ignored = [], []

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            found.append((name, obj[()]))

    try:
        with h5py.File(path, "r") as f:
            f.visititems(visit)
    except OSError as e:
        raise ConversionError(f"{path}: unreadable ({e})") from None
    tensors = {}
    for name, value in found:
        layer, _, weight = name.partition("/")
        if layer == "optimizer_weights":  # a Keras model.save(), not save_weights()
            ignored.append(name)
            continue
        hf, transpose = _tf2_name(weight)
        x = _float32(value)
        tensors[hf] = x.T if transpose and x.ndim == 2 else x
    return Source(_hf_config(folder), tensors, "tf2-h5", ignored)


# ----------------------------------------------------------------------------- TF1 checkpoint
# google-research/bert and /albert names. BERT's mirror HF's ("layer_3" for "layer.3");
# ALBERT's shared layers live in transformer/group_G/inner_group_K and are renamed by table.
# Leaves: kernel [in, out], gamma/beta, and the heads' output_weights (already [out, in]) and
# output_bias.

_TF1_LEAVES = {"kernel": ("weight", True), "gamma": ("weight", False)}
_TF1_LEAVES.update(beta=("bias", False), output_weights=("weight", False))
_TF1_LEAVES.update(output_bias=("bias", False), bias=("bias", False))
# Optimizer slots (Adam and ALBERT's LAMB both name theirs adam_m/adam_v), the step counter,
# and the loss-scaling state of NVIDIA's mixed-precision BERT.
_TF1_SLOTS = ("adam_m", "adam_v")
_TF1_STATE = ("global_step", "good_steps", "current_loss_scale", "loss_scale")

_ALBERT_MODULES = {
    "bert/embeddings/LayerNorm": "albert.embeddings.LayerNorm",
    "bert/encoder/embedding_hidden_mapping_in": "albert.encoder.embedding_hidden_mapping_in",
    "bert/pooler/dense": "albert.pooler",
    "cls/predictions": "predictions",
    "cls/predictions/transform/dense": "predictions.dense",
    "cls/predictions/transform/LayerNorm": "predictions.LayerNorm",
    "cls/seq_relationship": "sop_classifier.classifier",
}
_ALBERT_INNER = {
    "attention_1/self/query": "attention.query",
    "attention_1/self/key": "attention.key",
    "attention_1/self/value": "attention.value",
    "attention_1/output/dense": "attention.dense",
    "LayerNorm": "attention.LayerNorm",
    "ffn_1/intermediate/dense": "ffn",
    "ffn_1/intermediate/output/dense": "ffn_output",
    "LayerNorm_1": "full_layer_layer_norm",
}


def _tf1_module(module, albert):
    """The HF module path of a TF1 variable scope, or None when it has none."""
    if not albert:
        return re.sub(r"/layer_(\d+)(?=/|$)", r"/layer/\1", module).replace("/", ".")
    layer = re.fullmatch(r"bert/encoder/transformer/group_(\d+)/inner_group_(\d+)/(.+)", module)
    if layer:
        g, k, inner = layer.groups()
        tail = _ALBERT_INNER.get(inner)
        return tail and f"albert.encoder.albert_layer_groups.{g}.albert_layers.{k}.{tail}"
    return _ALBERT_MODULES.get(module)


def _tf1_name(name, albert):
    """``(HF name, transpose)``; the TF name itself when it has no HF place (listed unused)."""
    table = re.fullmatch(r"bert/embeddings/(\w+_embeddings)", name)
    if table:
        return f"{'albert' if albert else 'bert'}.embeddings.{table.group(1)}.weight", False
    module, _, leaf = name.rpartition("/")
    hf_leaf, transpose = _TF1_LEAVES.get(leaf, (None, False))
    hf_module = _tf1_module(module, albert) if hf_leaf else None
    return (f"{hf_module}.{hf_leaf}", transpose) if hf_module else (name, False)


def _tf1_prefixes(folder):
    """Checkpoint prefixes in ``folder``: each ``X.index`` with an ``X.data-*`` beside it."""
    indexes = glob.glob(os.path.join(glob.escape(folder), "*.index"))
    prefixes = (i.removesuffix(".index") for i in indexes)
    return sorted(p for p in prefixes if glob.glob(glob.escape(p) + ".data-*"))


def _tf1_prefix(folder):
    """The checkpoint to read: the only one, or the one the ``checkpoint`` file names."""
    state = os.path.join(folder, "checkpoint")
    if os.path.exists(state):
        with open(state, encoding="utf-8") as f:
            named = re.search(r'^model_checkpoint_path:\s*"(.+)"', f.read(), re.M)
        if named:
            return os.path.join(folder, named.group(1))
    prefixes = _tf1_prefixes(folder)
    if len(prefixes) != 1:
        raise ConversionError(
            f"{folder}: {len(prefixes)} TF checkpoints "
            f"({', '.join(map(os.path.basename, prefixes))}); keep one, or a 'checkpoint' file "
            "naming it"
        )
    return prefixes[0]


def _tf1_config(folder, albert):
    """HF config keys from ``bert_config.json`` / ``albert_config.json`` (the same names)."""
    path = next((os.path.join(folder, n) for n in TF1_CONFIGS if _has(n)(folder)), None)
    if path is None:
        raise ConversionError(f"{folder}: a TF checkpoint needs one of {', '.join(TF1_CONFIGS)}")
    config = dict(_read_json(path), model_type="albert" if albert else "bert")
    if config.get("net_structure_type", 0) or config.get("layers_to_keep"):
        raise ConversionError(f"{path}: ALBERT's net_structure_type/layers_to_keep unsupported")
    notes = []
    if config.get("hidden_act") == "gelu":
        # google-research's gelu is the tanh approximation (HF's gelu_new), not erf's.
        config["hidden_act"] = "gelu_new"
        notes.append(f"{os.path.basename(path)}: hidden_act gelu read as gelu_new (its tanh form)")
    return config, notes


def _read_tf1(folder):
    try:
        import tensorflow as tf
    except ImportError:
        raise ConversionError(
            f"{folder}: reading a TF checkpoint needs TensorFlow: pip install 'zhlm[tf1]'"
        ) from None
    prefix = _tf1_prefix(folder)
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
    except Exception as e:  # TF raises its own errors (DataLossError, NotFoundError)
        raise ConversionError(f"{prefix}: unreadable ({type(e).__name__}: {e})") from None
    albert = any("/transformer/group_" in n for n in shapes)
    config, notes = _tf1_config(folder, albert)
    tensors, ignored = {}, []
    for stored in sorted(shapes):
        name = stored.removeprefix("module/")  # TF-Hub exports add module/
        if name.rpartition("/")[2] in _TF1_SLOTS or name in _TF1_STATE:
            ignored.append(name)
            continue
        hf, transpose = _tf1_name(name, albert)
        x = _float32(reader.get_tensor(stored))
        tensors[hf] = x.T if transpose and x.ndim == 2 else x
    return Source(config, tensors, "tf1", ignored, notes)


# Searched in this order: safetensors first (no extra needed, no code run), the TF1 checkpoint
# last (the heaviest reader).
_FORMATS = (
    ("model.safetensors[.index.json]", _has("model.safetensors", "model.safetensors.index.json"),
     _read_safetensors),
    ("pytorch_model.bin[.index.json]", _has("pytorch_model.bin", "pytorch_model.bin.index.json"),
     _read_torch),
    ("flax_model.msgpack", _has("flax_model.msgpack"), _read_flax),
    ("tf_model.h5", _has("tf_model.h5"), _read_h5),
    ("*.ckpt.index + .data-* (TF1)", _tf1_prefixes, _read_tf1),
)  # fmt: skip
