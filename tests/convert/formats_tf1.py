"""TF1 checkpoints (Google's Chinese BERT and ALBERT, the wwm and MacBERT TF releases) import to
exactly what the same weights' safetensors folder imports to.

Run on its own, in an environment with TensorFlow (``pip install -e '.[tf1]'``):
``python -m pytest -q tests/convert/formats_tf1.py``. ``.ci/run`` makes that environment beside the
main one because an installed TensorFlow changes how etils (and so TFDS and zhlm.paths) open
``gs://`` paths: through ``tf.io.gfile`` instead of fsspec. The file's name keeps it out of the
main ``pytest tests`` run, which has no TensorFlow.

The checkpoints are written by TensorFlow's own ``SaveV2`` op under google-research/bert's and
/albert's variable names, with the Adam/LAMB slots and ``global_step`` a pretraining run leaves.
"""

import json
import re

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    FORMAT_FAMILIES,
    assert_same_import,
    copy_config,
    save_format_family,
    weights,
)

from zhlm import convert

# torch module -> TF1 variable scope in google-research/albert's modeling.py
ALBERT_SCOPES = {
    "albert.encoder.embedding_hidden_mapping_in": "bert/encoder/embedding_hidden_mapping_in",
    "albert.pooler": "bert/pooler/dense",
    "predictions": "cls/predictions",
    "predictions.dense": "cls/predictions/transform/dense",
    "predictions.LayerNorm": "cls/predictions/transform/LayerNorm",
    "sop_classifier.classifier": "cls/seq_relationship",
}
ALBERT_LAYER = {
    "attention.query": "attention_1/self/query",
    "attention.key": "attention_1/self/key",
    "attention.value": "attention_1/self/value",
    "attention.dense": "attention_1/output/dense",
    "attention.LayerNorm": "LayerNorm",
    "ffn": "ffn_1/intermediate/dense",
    "ffn_output": "ffn_1/intermediate/output/dense",
    "full_layer_layer_norm": "LayerNorm_1",
}
NORM = {"weight": "gamma", "bias": "beta"}
# Google's config files: HF's key names, no model_type, and their own "gelu" (tanh approximation)
CONFIG_KEYS = [
    "attention_probs_dropout_prob",
    "hidden_act",
    "hidden_dropout_prob",
    "hidden_size",
    "initializer_range",
    "intermediate_size",
    "max_position_embeddings",
    "num_attention_heads",
    "num_hidden_layers",
    "type_vocab_size",
    "vocab_size",
]
ALBERT_KEYS = ["embedding_size", "num_hidden_groups", "inner_group_num"]


def scope(module):
    if module.startswith("bert."):
        return re.sub(r"\.layer\.(\d+)", r"/layer_\1", module).replace(".", "/")
    if module.startswith("cls."):
        return module.replace(".", "/")
    layer = re.fullmatch(
        r"albert\.encoder\.albert_layer_groups\.(\d+)\.albert_layers\.(\d+)\.(.+)", module
    )
    if layer:
        g, k, inner = layer.groups()
        return f"bert/encoder/transformer/group_{g}/inner_group_{k}/{ALBERT_LAYER[inner]}"
    if module.startswith("albert.embeddings."):
        return module.replace("albert.", "bert/").replace(".", "/")
    return ALBERT_SCOPES[module]


def tf1_variables(model):
    """google-research's names and layouts: kernels [in, out], gamma/beta, bare embedding
    tables, and the heads' output_weights ([out, in]) / output_bias."""
    out = {}
    for module, leaf, kind, x in weights(model):
        name = scope(module)
        if kind == "embedding":
            out[name] = x
        elif kind == "norm":
            out[f"{name}/{NORM[leaf]}"] = x
        elif name.endswith("seq_relationship") or kind is None:  # the heads' own variables
            out[f"{name}/output_{'weights' if leaf == 'weight' else 'bias'}"] = x
        else:
            out[f"{name}/{'kernel' if leaf == 'weight' else 'bias'}"] = (
                x.T if leaf == "weight" else x
            )
    return out


def write_tf1(model, name, folder):
    variables = tf1_variables(model)
    rs = np.random.RandomState(1)
    for key in list(variables):  # what a run's Saver also writes
        for slot in ("adam_m", "adam_v"):
            variables[f"{key}/{slot}"] = rs.standard_normal(variables[key].shape).astype(np.float32)
    variables["global_step"] = np.int64(1000)
    names = sorted(variables)
    tf.raw_ops.SaveV2(
        prefix=str(folder / f"{name}_model.ckpt"),
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(variables[n]) for n in names],
    )
    hf = model.config.to_dict()
    config = {k: hf[k] for k in CONFIG_KEYS + (ALBERT_KEYS if name == "albert" else [])}
    config["hidden_act"] = "gelu"
    (folder / f"{name}_config.json").write_text(json.dumps(config))
    (folder / "config.json").unlink()  # a TF1 release has only its own config file


@pytest.mark.parametrize("name", sorted(FORMAT_FAMILIES))
def test_tf1_checkpoint_imports_exactly_as_safetensors(tmp_path, name):
    # Google's gelu is the tanh approximation: the safetensors twin says so in HF's words.
    model = save_format_family(name, tmp_path / "safetensors", hidden_act="gelu_new")
    want = convert.read_hf(str(tmp_path / "safetensors"))
    folder = copy_config(tmp_path / "safetensors", tmp_path / "tf1")
    write_tf1(model, name, folder)
    got = convert.read_hf(str(folder))
    report = got[3]
    assert report.format == "tf1" and not report.fresh and not report.unused
    assert len(report.ignored) == 2 * len(tf1_variables(model)) + 1
    assert report.lines() == [
        f"{name}_config.json: hidden_act gelu read as gelu_new (its tanh form)",
        f"ignored {len(report.ignored)} optimizer variables (adam_m, adam_v, global_step)",
    ]
    assert got[2].data.vocab == str(folder / "vocab.txt")
    assert_same_import(got, want)
