"""Flax models: one encoder and its pretraining heads for all six recipes.

The names below are imported on first use (PEP 562), so that ``from zhlm.models import sizes``
(every config file, through ``zhlm.defaults``) loads no JAX or Flax: a config, a data worker
or a launcher that only reads sizes should not pay for them.
"""

import importlib

_WHERE = {
    "abstract_variables": "build",
    "build_model": "build",
    "count_params": "build",
    "dropout_rngs": "build",
    "dummy_inputs": "build",
    "fit_vocab": "build",
    "init_variables": "build",
    "model_config": "build",
    "ModelConfig": "layers",
    "Model": "model",
    "SIZES": "sizes",
}

__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(importlib.import_module(f"zhlm.models.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'zhlm.models' has no attribute {name!r}")
