"""Every recipe file and every size variant loads, is locked, and builds its model abstractly."""

import os
import subprocess
import sys

import jax
import pytest
from helpers import RECIPES, ROOT, load_config

from zhlm import defaults
from zhlm.models import SIZES, abstract_variables, build_model
from zhlm.models.sizes import ALBERT_SIZES, BERT_SIZES

VARIANTS = [(r, s) for r in RECIPES for s in (ALBERT_SIZES if r == "albert" else BERT_SIZES)]


@pytest.mark.parametrize("recipe,size", VARIANTS)
def test_every_variant_builds_abstractly(recipe, size):
    config = load_config(recipe, size)
    assert config.recipe == recipe and config.model.size == size
    model = build_model(config)
    cfg = model.config
    dims = SIZES[size]
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads) == (
        dims["num_layers"],
        dims["hidden_size"],
        dims["num_heads"],
    )
    assert cfg.mlp_dim == 4 * cfg.hidden_size
    variables = abstract_variables(model)  # shapes only, nothing allocated
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree_util.tree_leaves(variables))


def test_recipe_specifics():
    assert load_config("ernie").model.layer_norm_eps == 1e-5
    assert load_config("ernie").model.hidden_act == "relu"
    albert = load_config("albert").model
    assert (albert.embed_dim, albert.share_layers, albert.dropout_rate) == (128, "all", 0.0)
    assert load_config("spanbert").model.span_boundary_head
    assert load_config("roberta_wwm").model.sentence_head == "none"
    assert load_config("macbert").masking.scheme == "correction"


def test_unknown_size_is_a_clear_error():
    with pytest.raises(ValueError, match="xxlarge"):
        load_config("bert", "xxlarge")  # only ALBERT has it


def test_the_recipe_list_is_the_config_files():
    files = {
        name[:-3]
        for name in os.listdir(os.path.join(ROOT, "configs"))
        if name.endswith(".py") and name != "__init__.py"  # the package the recipes install as
    }
    assert set(RECIPES) == files


def test_loading_a_config_imports_no_jax():
    """Configs (pretraining and fine-tuning) load without JAX or Flax: launchers and data
    workers read them, and a config file is no reason to initialise a backend."""
    code = (
        "import sys; from zhlm import config_files; "
        "config_files.load('finetune/ocnli', 'tiny'); config_files.load('bert', 'tiny'); "
        "print(sorted(m for m in ('jax', 'flax') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_cli_config_overrides_are_locked(tmp_path):
    """Through a real CLI (config_flags, lock_config=True): a mistyped override fails loudly."""
    cmd = [
        sys.executable,
        "-m",
        "zhlm.cli.convert",
        f"--config={ROOT}/configs/macbert.py:tiny",
        "--config.model.dropuot_rate=0.2",
        f"--input={tmp_path}/none",
        f"--output={tmp_path}/o",
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode != 0 and "(closest: config.model.dropout_rate)" in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_config_json_round_trip_and_unknown_keys():
    config = load_config("albert", "tiny")
    again = defaults.config_from_dict(config.to_dict())
    assert again.to_dict() == config.to_dict()
    with pytest.raises(KeyError, match="model.not_a_key"):
        defaults.config_from_dict({"model": {"not_a_key": 1}})


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("num_heads", 3, "not divisible"),
        ("share_layers", "half", "share_layers"),
        ("hidden_act", "swish", "hidden_act"),
        ("num_groups", 2, "share_layers='all'"),
        ("dtype", "float16", "dtype"),
    ],
)
def test_bad_model_options_fail_before_tracing(key, value, match):
    config = load_config("bert", "tiny")
    config.model[key] = value
    with pytest.raises(ValueError, match=match):
        build_model(config)
