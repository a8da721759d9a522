"""Parameter-only checkpoints: what ``zhlm-convert`` writes and ``init_from`` reads.

A folder with ``config.json`` (the zhlm config, so the model can be rebuilt without guessing)
and ``params/``, an orbax checkpoint of the parameter tree. Training checkpoints (train state,
optimizer, data position) are a separate concern of the train loop.
"""

import json

import jax
import ml_collections
import orbax.checkpoint as ocp

from zhlm import defaults, paths

CONFIG_FILE = "config.json"
PARAMS_DIR = "params"


def is_params_checkpoint(path: str) -> bool:
    path = paths.resolve(path)
    return (path / CONFIG_FILE).is_file() and (path / PARAMS_DIR).is_dir()


def save_params(path: str, variables, config: ml_collections.ConfigDict) -> None:
    """Writes ``variables['params']`` and ``config`` under ``path`` (created if missing)."""
    path = paths.resolve(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / CONFIG_FILE).write_text(config.to_json(indent=2))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(path / PARAMS_DIR, variables["params"], force=True)
    checkpointer.wait_until_finished()


def load_params(path: str):
    """``(variables, config)`` from a folder written by ``save_params``."""
    path = paths.resolve(path)
    if not is_params_checkpoint(path):
        raise FileNotFoundError(
            f"{path}: not a zhlm parameter checkpoint (needs {CONFIG_FILE} and {PARAMS_DIR}/)"
        )
    config = defaults.config_from_dict(json.loads((path / CONFIG_FILE).read_text()))
    params = ocp.StandardCheckpointer().restore(path / PARAMS_DIR)
    return {"params": jax.tree_util.tree_map(jax.numpy.asarray, params)}, config
