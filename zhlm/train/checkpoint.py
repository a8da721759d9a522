"""Parameter-only checkpoints: what ``zhlm-convert`` writes and ``init_from`` reads.

A folder with ``config.json`` (the zhlm config, so the model can be rebuilt without guessing)
and ``params/``, an orbax checkpoint of the parameter tree. Training checkpoints (train state,
optimizer, data position) are a separate concern of the train loop.
"""

import json
import os

import jax
import ml_collections
import orbax.checkpoint as ocp

from zhlm import defaults

CONFIG_FILE = "config.json"
PARAMS_DIR = "params"


def is_params_checkpoint(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CONFIG_FILE)) and os.path.isdir(
        os.path.join(path, PARAMS_DIR)
    )


def save_params(path: str, variables, config: ml_collections.ConfigDict) -> None:
    """Writes ``variables['params']`` and ``config`` under ``path`` (created if missing)."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, CONFIG_FILE), "w", encoding="utf-8") as f:
        f.write(config.to_json(indent=2))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(path, PARAMS_DIR), variables["params"], force=True)
    checkpointer.wait_until_finished()


def load_params(path: str):
    """``(variables, config)`` from a folder written by ``save_params``."""
    path = os.path.abspath(path)
    if not is_params_checkpoint(path):
        raise FileNotFoundError(
            f"{path}: not a zhlm parameter checkpoint (needs {CONFIG_FILE} and {PARAMS_DIR}/)"
        )
    with open(os.path.join(path, CONFIG_FILE), encoding="utf-8") as f:
        config = defaults.config_from_dict(json.load(f))
    params = ocp.StandardCheckpointer().restore(os.path.join(path, PARAMS_DIR))
    return {"params": jax.tree_util.tree_map(jax.numpy.asarray, params)}, config
