"""Where a run's state comes from and goes to: orbax checkpoints, ``init_from``, fresh.

Restore order: the workdir's latest checkpoint (train state and data-loader position, so the
run continues exactly where it stopped) -> ``config.train.init_from`` (parameters only, from any
source ``zhlm.train.checkpoint.load`` reads; fresh optimizer) -> fresh init.

A saved step is one of three things, and each is treated differently:
- *restorable*: the run continues from it;
- *corrupt* (files missing, truncated or unreadable): skipped for the previous step, and moved
  aside as ``corrupt-<step>`` once an older step has restored, so nothing is lost while no step
  restores;
- *incompatible* (complete, but its tree of keys, shapes and dtypes, or its recipe, differs
  from what this config builds: a changed optimizer, model size or recipe): the run stops before
  it writes anything, naming the differing keys and the config values that differ from the
  saved ``config.json``. Continuing would silently train another model.
When steps exist and none restores, the run stops too and lists each step and why. With
``config.train.restart`` both stops become a new run instead: the old run's files are kept in
``previous-<n>/`` and the workdir starts empty. A restorable checkpoint is always continued.

Saves are asynchronous (orbax copies the arrays to host memory before ``save`` returns, so the
next step may reuse the donated buffers), keep the last ``config.train.keep_checkpoints``.
"""

import errno
import json
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from flax import traverse_util

from zhlm import paths, run_files
from zhlm.errors import UserError
from zhlm.models import fit_vocab
from zhlm.train import checkpoint, curves

STATE, LOADER = "state", "loader"  # the items of a training checkpoint
RUN_FILES = (
    run_files.CONFIG,
    run_files.METRICS,
    run_files.TENSORBOARD,
    curves.CURVES,
    run_files.CHECKPOINTS,
)


class CheckpointError(UserError):
    """The workdir's checkpoints cannot be continued, or a save failed: the run stops with
    this one message, which says what to do."""


def manager(workdir: str, config) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=config.train.keep_checkpoints, create=True, enable_async_checkpointing=True
    )
    return ocp.CheckpointManager(run_files.path(workdir, run_files.CHECKPOINTS), options=options)


def save(mngr, state, loader_state: dict, force: bool = False):
    step = int(jax.device_get(state["step"]))
    args = ocp.args.Composite(
        **{STATE: ocp.args.StandardSave(state), LOADER: ocp.args.JsonSave(loader_state)}
    )
    try:
        mngr.save(step, args=args, force=force)
    except Exception as e:  # the previous asynchronous save's failure surfaces here
        raise save_failed(mngr, e) from e
    return step


def wait_until_saved(mngr):
    """Waits for the asynchronous save in flight; a failure becomes one :class:`CheckpointError`."""
    try:
        mngr.wait_until_finished()
    except Exception as e:
        raise save_failed(mngr, e) from e


def restore_latest(mngr, trainer, config):
    """``(state, loader_state)`` of the newest step that restores, or None when there is no
    step; :class:`CheckpointError` when a step is incompatible or none restores (see the
    module docstring)."""
    checkpoint.quiet_orbax()
    abstract, saved = trainer.abstract_state(), _saved_config(mngr)
    corrupt = {}
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            differences = incompatibility(epath.Path(mngr.directory) / str(step) / STATE, abstract)
        except Exception as e:  # a missing or truncated metadata file raises many types
            corrupt[step] = _why(e)
            continue
        if differences or saved.get("recipe", config.recipe) != config.recipe:
            raise CheckpointError(_incompatible_message(mngr, step, differences, saved, config))
        args = ocp.args.Composite(
            **{STATE: ocp.args.StandardRestore(abstract), LOADER: ocp.args.JsonRestore()}
        )
        try:
            restored = mngr.restore(step, args=args)
        except Exception as e:  # orbax and tensorstore raise many types for a broken folder
            corrupt[step] = _why(e)
            continue
        for bad, why in corrupt.items():
            logging.warning(
                "checkpoint %d in %s cannot be restored (%s); continuing from step %d and "
                "moving it aside", bad, mngr.directory, why, step,
            )  # fmt: skip
            _move_aside(mngr, bad)
        return restored[STATE], restored[LOADER]
    if corrupt:
        listed = "; ".join(f"step {s}: {why}" for s, why in corrupt.items())
        raise CheckpointError(
            f"no checkpoint in {mngr.directory} restores ({listed}); to start a new run here "
            "and keep these in previous-<n>/, pass --config.train.restart=True"
        )
    return None


def _why(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error)[:200]}"


def incompatibility(step_dir, abstract) -> list[str]:
    """How the tree saved in ``step_dir`` differs from ``abstract`` (keys, shapes, dtypes; []
    when it does not); raises when its metadata cannot be read (a corrupt step)."""
    have = _leaves(ocp.StandardCheckpointHandler().metadata(epath.Path(step_dir)))
    want = _leaves(abstract)
    out = [f"{k}: saved, not in this config's state" for k in have if k not in want]
    out += [f"{k}: in this config's state, not saved" for k in want if k not in have]
    out += [
        f"{k}: saved {have[k][0]} {have[k][1]}, this config builds {want[k][0]} {want[k][1]}"
        for k in want
        if k in have and have[k] != want[k]
    ]
    return out


def _leaves(tree) -> dict:
    """``{"opt_state/1/mu/...": (shape, dtype name)}``: saved metadata and abstract states name
    a namedtuple's fields differently (dict key vs attribute); the names are the same."""

    def name(key):
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                return str(getattr(key, attr))
        return str(key)

    return {
        "/".join(map(name, path)): (tuple(leaf.shape), np.dtype(leaf.dtype).name)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _saved_config(mngr) -> dict:
    """The workdir's ``config.json`` (the run that wrote the checkpoints), or {}."""
    path = epath.Path(mngr.directory).parent / run_files.CONFIG
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _flat(values: dict, prefix="") -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_changes(saved: dict, config) -> list[str]:
    """``key: saved -> now`` for every config value that differs from ``saved``."""
    old, new = _flat(saved), _flat(json.loads(config.to_json()))
    return [
        f"{k}: {old.get(k, '(absent)')!r} -> {new.get(k, '(absent)')!r}"
        for k in sorted(set(old) | set(new))
        if old.get(k) != new.get(k)
    ]


def _incompatible_message(mngr, step, differences, saved, config) -> str:
    changes = config_changes(saved, config)
    lines = [
        f"checkpoint {step} in {mngr.directory} was written by another config and cannot be "
        "continued; nothing was changed. Run with the saved config.json's values, use another "
        "--workdir, or pass --config.train.restart=True to keep that run in previous-<n>/ "
        "and start anew.",
        "  config values that differ from the saved config.json:",
        *([f"    {c}" for c in changes[:20]] or ["    (none, or no config.json was saved)"]),
    ]
    if differences:
        lines.append(f"  state that differs ({len(differences)}):")
        lines += [f"    {d}" for d in differences[:10]]
    return "\n".join(lines)


def start_over(workdir: str) -> str | None:
    """Moves a previous run's files into ``previous-<n>/`` (process 0; all processes wait);
    returns that folder, or None when the workdir holds no run."""
    root = run_files.path(workdir)
    present = [name for name in RUN_FILES if (root / name).exists()]
    target = None
    if present and jax.process_index() == 0:
        n = 1
        while (root / f"previous-{n}").exists():
            n += 1
        target = root / f"previous-{n}"
        target.mkdir(parents=True)
        for name in present:
            (root / name).rename(target / name)
        logging.warning("train.restart: the previous run in %s is kept in %s", root, target)
    _sync("zhlm start over")
    return str(target) if target else None


def _move_aside(mngr, step):
    """Process 0 renames checkpoint ``step`` to ``corrupt-<step>`` (``corrupt-<step>.<n>`` when
    a run that resumed from an earlier step broke the same step again); all processes wait."""
    if jax.process_index() == 0:
        src = epath.Path(mngr.directory) / str(step)
        name, n = f"corrupt-{step}", 0
        while (src.parent / name).exists():
            n += 1
            name = f"corrupt-{step}.{n}"
        if src.is_dir():
            src.rename(src.parent / name)
            logging.warning("moved %s to %s", src, name)
    _sync(f"zhlm corrupt checkpoint {step}")
    mngr.reload()


def _sync(name: str):
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def place_params(params, abstract_params, shardings, path: str, model_config=None):
    """``params`` (host arrays) on the mesh; every shape must equal the model's, after the
    vocabulary padding is fitted to ``model_config`` (when given)."""
    flat = traverse_util.flatten_dict(params, sep="/")
    if model_config is not None:
        flat = fit_vocab(flat, model_config)
    want = traverse_util.flatten_dict(abstract_params, sep="/")
    errors = [f"{k}: missing" for k in want if k not in flat]
    errors += [f"{k}: not in this model" for k in flat if k not in want]
    errors += [
        f"{k}: shape {tuple(np.shape(flat[k]))}, the config's model has {want[k].shape}"
        for k in want
        if k in flat and tuple(np.shape(flat[k])) != tuple(want[k].shape)
    ]
    if errors:
        more = f" and {len(errors) - 3} more" if len(errors) > 3 else ""
        raise UserError(
            f"init_from {path}: parameters do not fit config.model ({'; '.join(errors[:3])}"
            f"{more}): set its dims to the checkpoint's"
        )
    flat_sh = traverse_util.flatten_dict(shardings, sep="/")

    def put(key):
        x = np.asarray(flat[key], dtype=want[key].dtype)
        return jax.make_array_from_callback(x.shape, flat_sh[key], lambda index: x[index])

    return traverse_util.unflatten_dict({tuple(k.split("/")): put(k) for k in want})


def adopt_init(config, announce: bool = True) -> checkpoint.Loaded | None:
    """``config.train.init_from`` loaded (None when it is empty), with ``config`` made its
    model's: the architecture (how to run it stays the config's, ``checkpoint.RUNTIME_KEYS``)
    and, while ``data.vocab`` is empty, the vocabulary and tokenizer it was trained with. Called
    before the data and the model are built, so that both are the init's: a recipe named with
    one size continues a published model of any size, and its text is cut into the ids its
    embeddings were trained on. ``announce`` prints what changed."""
    if not config.train.init_from:
        return None
    path = config.train.init_from
    loaded = checkpoint.load(path, config, config.train.seed)
    changed = checkpoint.adopt_model(config, loaded.config.model)
    if loaded.vocab and not config.data.vocab:
        config.data.vocab, config.data.tokenizer = loaded.vocab, loaded.tokenizer
        changed["data.vocab"] = ("", loaded.vocab)
    if changed and announce:
        shown = ", ".join(f"{key}={new!r}" for key, (_, new) in changed.items())
        print(f"zhlm: from init_from {path}: {shown}", flush=True)
    return loaded


def restore_or_init(mngr, trainer, loader, config, loaded=None):
    """The state to train from, following the restore order of the module docstring; sets the
    loader's position. ``loaded`` is :func:`adopt_init`'s (else ``init_from`` is read here).
    Returns ``(state, where)``, ``where`` saying which source was used."""
    try:
        restored = restore_latest(mngr, trainer, config)
    except CheckpointError:
        if not config.train.restart:
            raise
        kept = start_over(str(epath.Path(mngr.directory).parent))
        epath.Path(mngr.directory).mkdir(parents=True, exist_ok=True)
        mngr.reload()
        restored, note = None, f" (the previous run is kept in {kept})"
    else:
        note = ""
    if restored is not None:
        state, loader_state = restored
        loader.set_state(loader_state)
        return state, f"checkpoint at step {int(state['step'])}"
    state = trainer.init(jax.random.key(config.train.seed))
    if config.train.init_from:
        path = config.train.init_from
        loaded = loaded or checkpoint.load(path, config, config.train.seed)
        logging.info("init_from: %s", loaded.description)
        params = loaded.params
        abstract = trainer.abstract_state()["params"]
        state = dict(
            state,
            params=place_params(
                params, abstract, trainer.state_shardings["params"], path, trainer.model.config
            ),
        )
        return state, f"parameters of {path}{note}"
    return state, f"fresh initialisation{note}"


def out_of_space(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) says the disk is full: an ``OSError``
    ENOSPC (or EDQUOT, a quota spent), or orbax's and tensorstore's wording of it."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = f"{type(error).__name__}: {error}"
        if any(sign in text for sign in ("RESOURCE_EXHAUSTED", "No space left", "ENOSPC")):
            return True
        error = error.__cause__ or error.__context__
    return False


def save_failed(mngr, error: Exception) -> CheckpointError:
    """One line for a save that failed (raised by ``save`` or ``wait_until_finished``): the
    newest step still on disk, and for a full disk the space a checkpoint takes and what is
    free. The partly written step is removed (it holds space, and no run reads it)."""
    directory = epath.Path(mngr.directory)
    steps = run_files.checkpoint_steps(directory.parent)
    kept = f"step {steps[-1]}, intact" if steps else "none"
    text = f"{type(error).__name__}: {error}"
    if not out_of_space(error):
        return CheckpointError(
            f"saving a checkpoint in {directory} failed ({text[:300]}); the last checkpoint "
            f"is {kept}: run the same command again to continue from it"
        )
    if jax.process_index() == 0:
        for partial in directory.glob("*.orbax-checkpoint-tmp*"):
            partial.rmtree()
    needs = ""
    if steps and not paths.is_remote(directory):
        newest = os.fspath(directory / str(steps[-1]))
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(newest) for f in fs)
        free = shutil.disk_usage(os.fspath(directory)).free
        needs = f" (a checkpoint takes {size / 1e6:.1f} MB, {free / 1e6:.1f} MB are free)"
    return CheckpointError(
        f"no space left in {directory} to save a checkpoint{needs}; the last checkpoint is "
        f"{kept}: free space and run the same command again to continue from it"
    )
