"""Flax models: one encoder and its pretraining heads for all six recipes."""

from zhlm.models.builder import (
    abstract_variables,
    build_model,
    count_params,
    dropout_rngs,
    dummy_inputs,
    fit_vocab,
    init_variables,
    model_config,
)
from zhlm.models.layers import ModelConfig
from zhlm.models.model import Model
from zhlm.models.sizes import SIZES

__all__ = [
    "SIZES",
    "Model",
    "ModelConfig",
    "abstract_variables",
    "build_model",
    "count_params",
    "dropout_rngs",
    "dummy_inputs",
    "fit_vocab",
    "init_variables",
    "model_config",
]
