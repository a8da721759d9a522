"""Parameter checkpoints, and the one place that decides where parameters come from.

A parameter checkpoint (what ``zhlm-convert`` writes, and a fine-tuning run's ``best/``) is a
folder with ``config.json`` (the zhlm config, so the model is rebuilt without guessing) and
``params/``, an orbax checkpoint of the parameter tree (``zhlm.run_files`` names the files).
Training checkpoints (train state, optimizer, data position) belong to ``resume``.

:func:`load` reads parameters from any source a user may name, in one order: a parameter
checkpoint (or a fine-tuning workdir's ``best/``), a pretraining workdir (its newest step's
parameters, without the optimizer), or a Hugging Face folder through the converter.
``init_from`` of pretraining, ``--init`` of fine-tuning and the tools all go through it.
"""

from __future__ import annotations

import dataclasses
import json
import logging as std_logging
import os
import sys
import traceback

import flax.linen as nn
import jax
import ml_collections
from absl import logging

from zhlm import defaults, paths, run_files
from zhlm.errors import NotFound, UserError
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


# Model keys that describe how to run, not what was trained: a run keeps its own config's.
RUNTIME_KEYS = ("dtype", "param_dtype", "remat", "dropout_rng", "attention_impl")


def adopt_model(config: ml_collections.ConfigDict, source_model) -> dict:
    """Sets ``config.model`` to a loaded source's architecture, keeping the config's
    :data:`RUNTIME_KEYS` (compute dtype, rematerialisation, dropout's PRNG, attention kernels);
    returns ``{key: (old, new)}`` of what changed."""
    changed = {}
    for key, value in source_model.items():
        if key not in RUNTIME_KEYS and config.model.get(key) != value:
            changed[key] = (config.model.get(key), value)
            config.model[key] = value
    return changed


def save_params(path: str, variables, config: ml_collections.ConfigDict) -> None:
    """Writes ``variables['params']`` and ``config`` under ``path`` (created if missing)."""
    root = run_files.path(path)
    root.mkdir(parents=True, exist_ok=True)
    (root / run_files.CONFIG).write_text(config.to_json(indent=2))
    import orbax.checkpoint as ocp  # here: a Hugging Face folder is read without orbax

    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(root / run_files.PARAMS, variables["params"], force=True)
    checkpointer.wait_until_finished()


class DamagedCheckpoint(UserError):
    """A parameter checkpoint whose files are missing, cut short or unreadable."""


# What to do about a damaged parameter checkpoint, unless the caller knows better.
REWRITE = (
    "write it again (a fine-tuning workdir's best/: run zhlm-finetune with --overwrite; a "
    "converted one: zhlm-convert) or give another checkpoint"
)


def load_params(path: str, remedy: str = REWRITE):
    """``(variables, config)`` from a folder written by :func:`save_params`. A folder whose
    files do not read (a copy or a write cut short) raises :class:`DamagedCheckpoint`, one line
    naming it, why, and ``remedy``."""
    if not run_files.is_params_checkpoint(path):
        raise NotFound(
            f"{path}: not a zhlm parameter checkpoint "
            f"(needs {run_files.CONFIG} and {run_files.PARAMS}/)"
        )
    config = _read_config(path, remedy)
    vocab = run_files.path(path, VOCAB)
    if vocab.is_file():  # the checkpoint's own copy is its vocabulary, wherever it now lies
        (config.task if "task" in config else config.data).vocab = str(vocab)
    folder = run_files.path(path, run_files.PARAMS)
    import orbax.checkpoint as ocp

    quiet_orbax()  # a failed read would print one traceback per array otherwise
    try:
        params = ocp.StandardCheckpointer().restore(folder)
    except Exception as e:  # orbax and tensorstore raise many types for a broken folder
        raise DamagedCheckpoint(f"{folder} {damage(e)}; {remedy}") from e
    return {"params": jax.tree_util.tree_map(jax.numpy.asarray, params)}, config


def damage(error: Exception) -> str:
    """ "cannot be read (<why>)": the first line of the innermost error orbax or tensorstore
    raised (the outer ones wrap it in pages of C++ context), shortened."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        error = inner
        seen.add(id(error))
    lines = str(error).strip().splitlines() or [""]
    why = f"{type(error).__name__}: {lines[0]}"
    if len(why) > 240:  # tensorstore's root cause comes last, after the paths it went through
        why = f"{why[:80]} ... {why[-150:]}"
    return f"cannot be read ({why})"


def load(
    source: str,
    config: ml_collections.ConfigDict | None = None,
    seed: int = 0,
    fresh_heads: bool = True,
) -> Loaded:
    """Parameters from ``source``: a parameter checkpoint, a fine-tuning workdir (its
    ``best/``, task head included), a pretraining workdir or a Hugging Face folder. ``config``
    (optional) is the recipe a Hugging Face model is read for (its heads; dimensions always
    come from the folder); ``seed`` initialises heads it lacks, or without ``fresh_heads``
    they are left out (``zhlm.convert.read_hf``)."""
    finetuned = run_files.finetuned_params(source)
    if finetuned:
        variables, saved = load_params(finetuned)
        loaded = Loaded(variables["params"], saved, f"zhlm checkpoint {finetuned}")
        source = finetuned  # its vocab.txt is the model's
    elif run_files.is_pretraining(source):
        loaded = _load_pretraining(source)
    else:
        from zhlm import convert

        _, variables, read, report = convert.read_hf(source, config, seed, fresh_heads)
        for line in report.lines():
            logging.info("%s: %s", source, line)
        loaded = Loaded(variables["params"], read, f"Hugging Face folder {source}")
        loaded.task_heads = report.task_heads
    vocab = _folder_vocab(source)
    if vocab:
        loaded.vocab = vocab
    elif "task" in loaded.config:  # a fine-tuned model (WordPiece only)
        loaded.vocab = loaded.config.task.vocab
    else:
        loaded.vocab, loaded.tokenizer = loaded.config.data.vocab, loaded.config.data.tokenizer
    return loaded


def _folder_vocab(source: str) -> str:
    """The source folder's own vocabulary (``zhlm.convert.tokenizer_files``: ``vocab.txt`` or
    a WordPiece ``tokenizer.json``), or "" when it has none."""
    if paths.is_remote(source):
        vocab = run_files.path(source, VOCAB)
        return str(vocab) if vocab.is_file() else ""
    from zhlm.convert import tokenizer_files

    return tokenizer_files.find_vocab(source) or ""


def _read_config(folder, remedy: str = REWRITE) -> ml_collections.ConfigDict:
    """The folder's config; one that does not read as JSON (cut short or overwritten) raises
    :class:`DamagedCheckpoint` with ``remedy``, one of another zhlm version a UserError."""
    path = run_files.path(folder, run_files.CONFIG)
    if not path.is_file():
        raise NotFound(f"{folder}: no {run_files.CONFIG}")
    try:
        values = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DamagedCheckpoint(f"{path} {damage(e)}; {remedy}") from e
    try:
        return defaults.config_from_dict(values)
    except (ValueError, KeyError) as e:  # written by another version of zhlm
        reason = e.args[0] if isinstance(e, KeyError) and e.args else e
        raise UserError(
            f"{path} does not read as a zhlm config: {reason}; write it again with this "
            "version of zhlm or use the version that wrote it"
        ) from e


def _load_pretraining(folder: str) -> Loaded:
    """The parameters of a pretraining workdir's newest step that reads, restored alone (no
    optimizer). Newer steps that do not read (truncated by a crash) are skipped with a warning,
    as the workdir's own resume skips them; the workdir itself is left as it is."""
    import orbax.checkpoint as ocp

    quiet_orbax()
    config = _read_config(folder)
    abstract = {"params": nn.unbox(abstract_variables(build_model(config)))["params"]}
    skipped = []
    for step in reversed(run_files.checkpoint_steps(folder)):
        restore = ocp.args.PyTreeRestore(
            item=abstract,
            restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
            partial_restore=True,
        )
        try:
            state = ocp.PyTreeCheckpointer().restore(
                run_files.path(folder, run_files.CHECKPOINTS, str(step), "state"), args=restore
            )
        except Exception as e:  # orbax and tensorstore raise many types for a broken folder
            skipped.append(f"step {step}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if skipped:
            logging.warning(
                "%s: took step %d; newer steps do not read (%s)", folder, step, "; ".join(skipped)
            )
        params = jax.tree_util.tree_map(jax.numpy.asarray, state["params"])
        return Loaded(params, config, f"pretraining workdir {folder} (step {step})")
    if skipped:
        raise UserError(f"{folder}: no checkpoint reads ({'; '.join(skipped)})")
    raise NotFound(f"{folder}/{run_files.CHECKPOINTS}: no checkpoint to start from")


def quiet_orbax():
    """Keeps orbax's own reports of a failed checkpoint read or write off the terminal, where
    zhlm reports the failure once, in one line (they go to the debug log).

    - When one array of a checkpoint fails to read, orbax closes its event loop while the reads
      of the other arrays are in flight; each then reports ``RuntimeError('Event loop is
      closed')`` as an unraisable exception: one traceback per array; after a failed save,
      each abandoned write does the same when the interpreter exits.
    - A failed asynchronous save is logged at error level, with its traceback, by several of
      orbax's threads before the exception reaches the caller, and asyncio reports each of
      its other writes' futures as an "exception was never retrieved".
    Every other unraisable exception and log line is shown as before. Idempotent.
    """
    if getattr(sys.unraisablehook, "zhlm_quiet", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        e, code = unraisable.exc_value, getattr(unraisable.object, "cr_code", None)
        if isinstance(e, RuntimeError) and str(e) == "Event loop is closed":
            return
        if code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
            return  # a write abandoned after its save failed, collected at exit
        previous(unraisable)

    hook.zhlm_quiet = True
    sys.unraisablehook = hook
    std_logging.getLogger("absl").addFilter(_demote_orbax_errors)
    std_logging.getLogger("asyncio").addFilter(_demote_abandoned_futures)


def _demote_abandoned_futures(record) -> bool:
    """A logging filter: asyncio's "exception was never retrieved" of a failed checkpoint
    write (orbax gathered the writes and raised the first failure; the others' futures are
    collected later) is dropped; every other asyncio line is kept."""
    if "exception was never retrieved" not in str(record.msg) or not record.exc_info:
        return True
    frames = traceback.extract_tb(record.exc_info[2])
    return not any(f"{os.sep}orbax{os.sep}" in frame.filename for frame in frames)


def _demote_orbax_errors(record) -> bool:
    """A logging filter: orbax's error lines become debug lines."""
    if record.levelno >= std_logging.ERROR and f"{os.sep}orbax{os.sep}" in record.pathname:
        if logging.get_verbosity() >= logging.DEBUG:
            record.levelno, record.levelname = std_logging.DEBUG, "DEBUG"
            return True
        return False
    return True
