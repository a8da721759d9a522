"""Numerical parity with Hugging Face transformers (PyTorch CPU, random init, eval mode), and
the converter's behaviour on incomplete, mismatching and missing folders."""

import json
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import safetensors.numpy
import torch
import transformers as hf
from helpers import ROOT, load_config, tiny_hf

import zhlm
from zhlm import convert

TOL = 1e-4
# Per family, the transformers architecture and config keys of ``helpers.tiny_hf``'s model.
FAMILIES = {
    "bert": dict(
        architecture="BertForPreTraining", vocab_size=101, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
    ),
    # groups and inner groups with L not divisible by G, factorised embedding E != H
    "albert": dict(
        architecture="AlbertForPreTraining", vocab_size=101, embedding_size=16, hidden_size=32,
        num_hidden_layers=5, num_attention_heads=4, intermediate_size=37, num_hidden_groups=2,
        inner_group_num=2, max_position_embeddings=40,
    ),
    "ernie": dict(
        architecture="ErnieForPreTraining", vocab_size=101, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, hidden_act="relu", layer_norm_eps=1e-5,
        max_position_embeddings=40,
    ),
}  # fmt: skip


def inputs():
    rs = np.random.RandomState(0)
    ids = rs.randint(1, 101, (3, 13))
    types = np.zeros_like(ids)
    types[:, 7:] = 1
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    return ids, types, mask


def torch_outputs(model):
    ids, types, mask = (torch.tensor(x) for x in inputs())
    with torch.no_grad():
        o = model(
            input_ids=ids, token_type_ids=types, attention_mask=mask, output_hidden_states=True
        )
        base = model.base_model(input_ids=ids, token_type_ids=types, attention_mask=mask)
    sentence = o.sop_logits if hasattr(o, "sop_logits") else o.seq_relationship_logits
    return dict(
        sequence_output=base.last_hidden_state.numpy(),
        pooled_output=base.pooler_output.numpy(),
        mlm_logits=o.prediction_logits.numpy(),
        sentence_logits=sentence.numpy(),
    )


def saved(name, folder):
    """A seeded random HF model of family ``name`` saved in ``folder``, and its outputs."""
    model = tiny_hf(**FAMILIES[name])
    model.save_pretrained(folder)
    return name, model, folder, torch_outputs(model)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    return saved(request.param, tmp_path_factory.mktemp(request.param))


def max_errors(out, ref):
    return {k: float(np.abs(np.asarray(out[k]) - ref[k]).max()) for k in ref}


@pytest.mark.slow
def test_parity_with_transformers(family):
    name, _, folder, ref = family
    model, variables, config, report = convert.read_hf(str(folder))
    assert report.lines() == []
    out = model.apply(variables, *(jnp.asarray(x) for x in inputs()))
    errors = max_errors(out, ref)
    print(name, errors)  # the figures quoted in the closing note
    assert max(errors.values()) < TOL, errors
    positions = jnp.array([[1, 5, 12], [0, 3, 8], [2, 2, 2]])
    picked = model.apply(variables, *(jnp.asarray(x) for x in inputs()), masked_positions=positions)
    want = np.take_along_axis(ref["mlm_logits"], np.asarray(positions)[..., None], axis=1)
    assert np.abs(picked["mlm_logits"] - want).max() < TOL


def test_export_loads_in_transformers_with_same_outputs(family, tmp_path):
    name, hf_model, folder, ref = family
    model, variables, config = zhlm.from_hf(str(folder))
    zhlm.to_hf(model, variables, config, str(tmp_path))
    again = type(hf_model).from_pretrained(tmp_path).eval()
    errors = max_errors(torch_outputs(again), ref)
    assert max(errors.values()) < TOL, errors


def test_encoder_only_folder_gets_fresh_heads(tmp_path, capsys):
    tiny_hf(
        "BertModel", vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37,
    ).save_pretrained(tmp_path)  # fmt: skip
    model, variables, config = zhlm.from_hf(str(tmp_path))
    printed = capsys.readouterr().out
    assert "initialised fresh (not in the source): mlm/transform/kernel" in printed
    assert "sentence/kernel" in printed and "embeddings/" not in printed
    out = model.apply(variables, *(jnp.asarray(x) for x in inputs()))
    assert np.isfinite(out["mlm_logits"]).all()


def test_vocabulary_mismatch_lists_every_tensor(tmp_path):
    tiny_hf(**FAMILIES["bert"]).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["vocab_size"] = 100
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(convert.ConversionError) as err:
        convert.read_hf(str(tmp_path))
    message = str(err.value)
    assert "bert.embeddings.word_embeddings.weight: shape (101, 32), expected (100, 32)" in message
    assert "cls.predictions.bias: shape (101,), expected (100,)" in message


def test_missing_encoder_tensor_is_an_error(tmp_path):
    tiny_hf(**FAMILIES["bert"]).save_pretrained(tmp_path)
    tensors = safetensors.numpy.load_file(tmp_path / "model.safetensors")
    del tensors["bert.encoder.layer.1.output.dense.weight"]
    safetensors.numpy.save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(convert.ConversionError, match="layer.1.output.dense.weight: missing"):
        convert.read_hf(str(tmp_path))


def test_bfloat16_folder_loads(tmp_path):
    tiny_hf(**FAMILIES["bert"]).to(torch.bfloat16).save_pretrained(tmp_path)
    model, variables, _, _ = convert.read_hf(str(tmp_path))
    assert variables["params"]["pooler"]["dense"]["kernel"].dtype == jnp.float32


def test_recipe_config_keeps_its_heads(tmp_path):
    _, _, folder, _ = saved("bert", tmp_path)
    model, _, config = zhlm.from_hf(str(folder), load_config("macbert", "tiny"))
    assert config.recipe == "macbert" and config.model.sentence_head == "sop"
    assert (model.config.num_layers, model.config.hidden_size) == (3, 32)
    assert config.model.size == "custom"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["spanbert", "roberta_wwm"])
def test_export_without_sentence_head(recipe, tmp_path):
    config = load_config(recipe, "tiny")
    config.model.vocab_size = 101
    import jax

    from zhlm.models import build_model, init_variables

    model = build_model(config)
    variables = init_variables(model, jax.random.key(0))
    report = zhlm.to_hf(model, variables, config, str(tmp_path))
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == [
        "BertForMaskedLM"
    ]
    assert any(p.startswith("sbo/") for p in report.unused) == (recipe == "spanbert")
    again = hf.BertForMaskedLM.from_pretrained(tmp_path).eval()
    ids, types, mask = inputs()
    with torch.no_grad():
        logits = again(
            input_ids=torch.tensor(ids),
            token_type_ids=torch.tensor(types),
            attention_mask=torch.tensor(mask),
        ).logits.numpy()
    ours = model.apply(variables, jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))
    assert np.abs(ours["mlm_logits"] - logits).max() < TOL


def test_partial_sharing_cannot_be_exported(tmp_path):
    config = load_config("bert", "tiny")
    config.model.share_layers = "attention"
    import jax

    from zhlm.models import build_model, init_variables

    model = build_model(config)
    with pytest.raises(convert.ConversionError, match="no Hugging Face equivalent"):
        zhlm.to_hf(model, init_variables(model, jax.random.key(0)), config, str(tmp_path))


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "zhlm.cli.convert", *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.slow
def test_cli_round_trip_through_a_zhlm_checkpoint(tmp_path):
    """One family through the CLI (ALBERT: groups and E); the library round trip covers all."""
    _, _, folder, _ = saved("albert", tmp_path / "src")
    first = cli(f"--input={folder}", f"--output={tmp_path}/ckpt")
    assert first.returncode == 0, first.stderr
    second = cli(f"--input={tmp_path}/ckpt", f"--output={tmp_path}/hf")
    assert second.returncode == 0, second.stderr
    a = safetensors.numpy.load_file(folder / "model.safetensors")
    b = safetensors.numpy.load_file(tmp_path / "hf" / "model.safetensors")
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_cli_missing_folder_is_one_line(tmp_path):
    run = cli(f"--input={tmp_path}/nope", f"--output={tmp_path}/out")
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1].startswith("zhlm-convert:")
    assert "Traceback" not in run.stderr
