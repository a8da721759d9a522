"""A task model's parameters: how pretrained ones fill it, and how a fine-tuned one is saved and
loaded (``best/``), apart from training so that predicting imports no optimizer.

Every task model subclasses ``zhlm.models.Model`` and calls its ``encode`` and ``pooler``: the
embeddings, encoder and pooler are the pretraining model's modules under the same names, so a
pretrained tree drops in by construction. The head (named by the kind, as in Hugging Face) is
fresh unless the init has one of the right shape.
"""

from __future__ import annotations

import flax.linen as nn
import flax.traverse_util as traverse
import jax
import jax.numpy as jnp

from zhlm import run_files
from zhlm.errors import UserError
from zhlm.finetune import kinds
from zhlm.train import checkpoint

# The parts of a pretrained tree a task model reuses.
ENCODER_PARTS = ("embeddings", "encoder", "pooler")


def init_params(model: nn.Module, rng, inputs):
    """Fresh, unboxed parameters of a task model for example ``inputs`` (arrays or shapes)."""
    zeros = [jnp.zeros(x.shape, x.dtype) for x in inputs]
    return nn.unbox(jax.jit(model.init)(rng, *zeros))["params"]


def param_shapes(model: nn.Module, inputs):
    """The parameters :func:`init_params` would give, as shapes and dtypes: nothing is
    computed or compiled."""
    zeros = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    shapes = jax.eval_shape(lambda *x: model.init(jax.random.key(0), *x), *zeros)
    return nn.unbox(shapes)["params"]


def merge(fresh: dict, pretrained: dict, head: str) -> tuple[dict, list[str]]:
    """``fresh`` with the :data:`ENCODER_PARTS` (and the task ``head``, if the init has one of
    the right shape) replaced by ``pretrained``; returns the tree and the names left fresh. Any
    shape difference inside the encoder is an error naming the parameter."""
    out = dict(fresh)
    for part in (*ENCODER_PARTS, head):
        if part not in fresh or part not in pretrained:
            continue
        new, old = traverse.flatten_dict(fresh[part]), traverse.flatten_dict(pretrained[part])
        mismatch = [
            "/".join((part, *k)) for k in new if k not in old or old[k].shape != new[k].shape
        ]
        if part == head and mismatch:
            continue  # e.g. a classifier for another label set: train a fresh one
        if mismatch:
            raise UserError(
                f"pretrained parameters do not fit the model: {', '.join(mismatch)}; give an "
                "--init of the same architecture, or none to start from random weights"
            )
        out[part] = traverse.unflatten_dict({k: _as(old[k], new[k].dtype) for k in new})
    left_fresh = [part for part in out if out[part] is fresh[part]]
    return out, left_fresh


def _as(x, dtype) -> jax.Array:
    """``x`` on the device as ``dtype``, compiling nothing where it already is one (unlike
    ``jnp.asarray``, which compiles a program a shape for a host array)."""
    if x.dtype != dtype:
        x = x.astype(dtype)
    return x if isinstance(x, jax.Array) else jax.device_put(x)


def save_finetuned(path, params, config) -> str:
    """A parameter checkpoint of a task model (``zhlm.train.checkpoint``); returns its path."""
    checkpoint.save_params(path, {"params": params}, config)
    return str(run_files.path(path))


def load_finetuned(path: str):
    """``(model, params, config)`` of a folder :func:`save_finetuned` wrote."""
    variables, config = checkpoint.load_params(path)
    return kinds.task_model(config), variables["params"], config
