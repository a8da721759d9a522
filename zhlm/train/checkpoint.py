"""Parameter checkpoints, and the one place that decides where parameters come from.

A parameter checkpoint (what ``zhlm-convert`` writes, and a fine-tuning run's ``best/``) is a
folder with ``config.json`` (the zhlm config, so the model is rebuilt without guessing) and
``params/``, an orbax checkpoint of the parameter tree (``zhlm.workdir`` names the files).
Training checkpoints (train state, optimizer, data position) belong to ``resume``.

:func:`load` reads parameters from any source a user may name, in one order: a parameter
checkpoint, a pretraining workdir (its newest step's parameters, without the optimizer), or a
Hugging Face folder through the converter. ``init_from`` of pretraining, ``--init`` of
fine-tuning and the tools all go through it.
"""

from __future__ import annotations

import dataclasses
import json

import flax.linen as nn
import jax
import ml_collections
import orbax.checkpoint as ocp
from absl import logging

from zhlm import defaults, workdir
from zhlm.models import abstract_variables, build_model

VOCAB = "vocab.txt"  # a Hugging Face folder's (or any source folder's) WordPiece vocabulary


@dataclasses.dataclass
class Loaded:
    """What :func:`load` found: parameters, the source's zhlm config, a description for logs
    and results, the vocabulary the source was trained with (the folder's ``vocab.txt``, else
    the one its config names; "": Google's Chinese vocab) and its ``tokenizer`` kind, and the
    task heads of a ``BertFor<Task>`` folder (``{"classifier": {"kernel", "bias"}}``), which
    only a task model of the same shape takes."""

    params: dict
    config: ml_collections.ConfigDict
    description: str
    vocab: str = ""
    tokenizer: str = "wordpiece"
    task_heads: dict = dataclasses.field(default_factory=dict)

    def with_task_heads(self) -> dict:
        """The parameters and the task heads in one tree, as a task model names them."""
        return dict(self.params, **self.task_heads)


def save_params(path: str, variables, config: ml_collections.ConfigDict) -> None:
    """Writes ``variables['params']`` and ``config`` under ``path`` (created if missing)."""
    root = workdir.path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / workdir.CONFIG).write_text(config.to_json(indent=2))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(root / workdir.PARAMS, variables["params"], force=True)
    checkpointer.wait_until_finished()


def load_params(path: str):
    """``(variables, config)`` from a folder written by :func:`save_params`."""
    if not workdir.is_params_checkpoint(path):
        raise FileNotFoundError(
            f"{path}: not a zhlm parameter checkpoint "
            f"(needs {workdir.CONFIG} and {workdir.PARAMS}/)"
        )
    config = _read_config(path)
    params = ocp.StandardCheckpointer().restore(workdir.path(path, workdir.PARAMS))
    return {"params": jax.tree_util.tree_map(jax.numpy.asarray, params)}, config


def load(source: str, config: ml_collections.ConfigDict | None = None, seed: int = 0) -> Loaded:
    """Parameters from ``source``: a parameter checkpoint, a pretraining workdir or a Hugging
    Face folder. ``config`` (optional) is the recipe a Hugging Face model is read for (its
    heads; dimensions always come from the folder); ``seed`` initialises heads it lacks."""
    if workdir.is_params_checkpoint(source):
        variables, saved = load_params(source)
        loaded = Loaded(variables["params"], saved, f"zhlm checkpoint {source}")
    elif workdir.is_pretraining(source):
        loaded = _load_pretraining(source)
    else:
        from zhlm import convert

        _, variables, read, report = convert.read_hf(source, config, seed)
        for line in report.lines():
            logging.info("%s: %s", source, line)
        loaded = Loaded(variables["params"], read, f"Hugging Face folder {source}")
        loaded.task_heads = report.task_heads
    vocab = workdir.path(source, VOCAB)
    if vocab.is_file():
        loaded.vocab = str(vocab)
    elif "task" in loaded.config:  # a fine-tuned model (WordPiece only)
        loaded.vocab = loaded.config.task.vocab
    else:
        loaded.vocab, loaded.tokenizer = loaded.config.data.vocab, loaded.config.data.tokenizer
    return loaded


def _read_config(folder) -> ml_collections.ConfigDict:
    path = workdir.path(folder, workdir.CONFIG)
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: no {workdir.CONFIG}")
    return defaults.config_from_dict(json.loads(path.read_text()))


def _load_pretraining(folder: str) -> Loaded:
    """The parameters of a pretraining workdir's newest step, restored alone (no optimizer)."""
    config = _read_config(folder)
    options = ocp.CheckpointManagerOptions(read_only=True)
    with ocp.CheckpointManager(workdir.path(folder, workdir.CHECKPOINTS), options=options) as m:
        step = m.latest_step()
        if step is None:
            raise FileNotFoundError(f"{folder}/{workdir.CHECKPOINTS}: no checkpoint to start from")
        abstract = {"params": nn.unbox(abstract_variables(build_model(config)))["params"]}
        restore = ocp.args.PyTreeRestore(
            item=abstract,
            restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
            partial_restore=True,
        )
        state = m.restore(step, args=ocp.args.Composite(state=restore)).state
    params = jax.tree_util.tree_map(jax.numpy.asarray, state["params"])
    return Loaded(params, config, f"pretraining workdir {folder} (step {step})")
