"""Every published checkpoint format imports to exactly what the safetensors folder imports to.

Each format is written from a random-init transformers model by its own library (torch for
``pytorch_model.bin``, flax.serialization for ``flax_model.msgpack``, h5py in Keras' layout for
``tf_model.h5``), in the names HF's Flax and TF2 models give their weights, so these writers
follow HF's rules and not the reader's. TF1 checkpoints need TensorFlow, which changes how
etils/TFDS open ``gs://`` paths once installed: their test is
``tests/convert/formats_tf1.py``, run by ``.ci/run`` in an environment of its own.
"""

import json
import sys

import flax.serialization
import flax.traverse_util as traverse
import h5py
import numpy as np
import pytest
import safetensors.numpy
import torch
from absl import flags
from helpers import (
    FORMAT_FAMILIES,
    FORMAT_VOCAB,
    assert_same_import,
    copy_config,
    save_format_family,
    weights,
    write_vocab,
)

from zhlm import convert
from zhlm.cli import convert as cli
from zhlm.convert import formats

# ----------------------------------------------------------------------------- writers


def write_bin(model, folder, shards=1):
    state = model.state_dict()
    if shards == 1:
        torch.save(state, folder / "pytorch_model.bin")
        return
    keys = sorted(state)
    weight_map = {}
    for i in range(shards):
        name = f"pytorch_model-{i + 1:05d}-of-{shards:05d}.bin"
        part = {k: state[k] for k in keys[i::shards]}
        torch.save(part, folder / name)
        weight_map.update(dict.fromkeys(part, name))
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))


def write_msgpack(model, folder):
    """HF's PyTorch -> Flax rule: same module paths; Linear weights become transposed
    ``kernel``, LayerNorm weights ``scale``, embedding tables ``embedding``."""
    tree = {}
    for module, leaf, kind, x in weights(model):
        if leaf == "weight":
            leaf, x = {"dense": ("kernel", x.T), "norm": ("scale", x)}.get(kind, ("embedding", x))
        tree[(*module.split("."), leaf)] = x
    data = flax.serialization.to_bytes(traverse.unflatten_dict(tree))
    (folder / "flax_model.msgpack").write_bytes(data)


def tf2_path(module):
    """HF's TF2 layer names: list items as ``name_._i``, BERT's heads in ``X___cls`` layers."""
    parts = []
    for part in module.split("."):
        if part.isdigit():
            parts[-1] += f"_._{part}"
        else:
            parts.append(part)
    if parts[0] == "cls":
        parts[0] = "mlm___cls" if parts[1] == "predictions" else "nsp___cls"
    return parts


def write_h5(model, folder, model_name):
    """``save_weights`` of HF's TF2 model: one group per top-level layer, datasets named
    ``<model>/<path>:0``; kernels [in, out], gamma/beta, the word table ``weight`` and the other
    tables ``embeddings``."""
    layers = {}
    for module, leaf, kind, x in weights(model):
        if kind == "dense" and leaf == "weight":
            leaf, x = "kernel", x.T
        elif kind == "norm":
            leaf = {"weight": "gamma", "bias": "beta"}[leaf]
        elif kind == "embedding":
            leaf = "weight" if module.endswith("word_embeddings") else "embeddings"
        path = tf2_path(module)
        layers.setdefault(path[0], []).append(("/".join([model_name, *path, leaf]) + ":0", x))
    with h5py.File(folder / "tf_model.h5", "w") as f:
        f.attrs["layer_names"] = [n.encode() for n in layers]
        for layer, items in layers.items():
            group = f.create_group(layer)
            group.attrs["weight_names"] = [w.encode() for w, _ in items]
            for w, x in items:
                group.create_dataset(w, data=x)


WRITERS = {
    "pytorch": lambda m, d, name: write_bin(m, d),
    "pytorch-sharded": lambda m, d, name: write_bin(m, d, shards=3),
    "flax": lambda m, d, name: write_msgpack(m, d),
    "tf2-h5": lambda m, d, name: write_h5(m, d, f"tf_{name}_for_pre_training"),
}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Per family, built once: the torch model, its safetensors folder and what it reads as."""
    cache = {}

    def get(name):
        if name not in cache:
            folder = tmp_path_factory.mktemp(name) / "safetensors"
            cache[name] = save_format_family(name, folder), folder, formats.read_source(str(folder))
        return cache[name]

    return get


def written(references, name, fmt):
    model, folder, want = references(name)
    dst = copy_config(folder, folder.parent / fmt)
    WRITERS[fmt](model, dst, name)
    return dst, want


# Every format of both families (sharding once: the same code for all formats).
CASES = [
    (f, fmt) for f in sorted(FORMAT_FAMILIES) for fmt in sorted(WRITERS) if fmt != "pytorch-sharded"
]
CASES.append(("bert", "pytorch-sharded"))


@pytest.mark.parametrize("name, fmt", CASES)
def test_format_reads_the_tensors_safetensors_holds(references, name, fmt):
    """The same config and the same arrays under the same names, to the last bit: what the
    reader makes of them can then only be the same too (checked on outputs below)."""
    dst, want = written(references, name, fmt)
    got = formats.read_source(str(dst))
    assert got.format == fmt.removesuffix("-sharded") and got.ignored == []
    assert got.vocab == str(dst / "vocab.txt")
    assert got.hf_config == want.hf_config
    for key, x in want.tensors.items():
        np.testing.assert_array_equal(got.tensors.pop(key), x, err_msg=key)
    # torch.save keeps the tied decoder that save_pretrained leaves out: copies, nothing else.
    for key, x in got.tensors.items():
        np.testing.assert_array_equal(x, want.tensors[TIED[name][key]], err_msg=key)


TIED = {  # a tied decoder tensor -> the tensor it is
    "bert": {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    },
    "albert": {
        "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
        "predictions.decoder.bias": "predictions.bias",
    },
}


@pytest.fixture(scope="module")
def albert_import(references):
    return convert.read_hf(str(references("albert")[1]))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["flax", "pytorch", "tf2-h5"])
def test_format_imports_with_the_same_outputs(references, albert_import, fmt):
    """The whole import on the harder family (ALBERT: groups, a factorised embedding)."""
    dst, _ = written(references, "albert", fmt)
    got = convert.read_hf(str(dst))
    assert got[3].format == fmt and got[3].lines() == []
    assert got[2].data.vocab == str(dst / "vocab.txt")
    assert_same_import(got, albert_import)


class Payload:
    """A pickled object that would run code when loaded without ``weights_only``."""

    ran = False

    def __reduce__(self):
        return (Payload._run, ())

    @staticmethod
    def _run():
        Payload.ran = True


@pytest.mark.parametrize(
    "content, message",
    [
        ({"bert.embeddings.word_embeddings.weight": Payload()}, "refused"),
        ({"bert.embeddings.word_embeddings.weight": 3}, "is a int, not a tensor"),
        ([torch.zeros(2)], "holds a list, not a state dict"),
    ],
)
def test_bin_that_is_not_tensors_is_refused(tmp_path, content, message):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    torch.save(content, tmp_path / "pytorch_model.bin")
    with pytest.raises(convert.ConversionError, match=message) as err:
        convert.read_hf(str(tmp_path))
    assert not Payload.ran
    assert len(str(err.value).splitlines()) == 1


def test_vocabulary_that_disagrees_with_the_embedding_names_both(tmp_path):
    save_format_family("bert", tmp_path)
    write_vocab(tmp_path, FORMAT_VOCAB - 1)
    with pytest.raises(convert.ConversionError) as err:
        convert.read_hf(str(tmp_path))
    assert str(err.value) == (
        f"{tmp_path}/vocab.txt: {FORMAT_VOCAB - 1} tokens, but "
        f"bert.embeddings.word_embeddings.weight has {FORMAT_VOCAB} rows "
        "(the vocabulary is not the one the model was trained with)"
    )


@pytest.mark.parametrize(
    "module, files, extra",
    [
        ("torch", ["pytorch_model.bin"], "zhlm[torch]"),
        ("h5py", ["tf_model.h5"], "zhlm[h5]"),
        ("tensorflow", ["bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"], "[tf1]"),
    ],
)
def test_missing_reader_is_one_line_naming_the_extra(tmp_path, monkeypatch, module, files, extra):
    for name in files:
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now raises ImportError
    with pytest.raises(convert.ConversionError) as err:
        formats.read_source(str(tmp_path))
    assert extra in str(err.value) and len(str(err.value).splitlines()) == 1


def test_folder_without_weights_says_what_was_looked_for(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(convert.ConversionError) as err:
        convert.read_hf(str(tmp_path))
    for name in ("model.safetensors", "pytorch_model.bin", "flax_model.msgpack", "tf_model.h5"):
        assert name in str(err.value)
    assert ".ckpt.index" in str(err.value)


def test_safetensors_is_read_first(tmp_path):
    save_format_family("bert", tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    assert formats.read_source(str(tmp_path)).format == "safetensors"


def test_cli_turns_a_bin_folder_into_safetensors(tmp_path, capsys):
    model = save_format_family("bert", tmp_path / "ref")
    src = copy_config(tmp_path / "ref", tmp_path / "bin")
    write_bin(model, src)
    # In process: the subprocess CLI test (test_hf_parity) already covers the entry point.
    flags.FLAGS(["zhlm-convert", f"--input={src}", f"--output={tmp_path}/hf", "--to=hf"])
    try:
        assert cli.main(["zhlm-convert"]) == 0
    finally:
        flags.FLAGS.unparse_flags()
    assert f"read pytorch weights from {src}" in capsys.readouterr().out
    assert (tmp_path / "hf" / "vocab.txt").read_text() == (src / "vocab.txt").read_text()
    want = safetensors.numpy.load_file(tmp_path / "ref" / "model.safetensors")
    got = safetensors.numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
