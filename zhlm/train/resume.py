"""Where a run's state comes from and goes to: orbax checkpoints, ``init_from``, fresh.

Restore order: the workdir's latest checkpoint (train state and data-loader position, so the
run continues exactly where it stopped) -> ``config.train.init_from`` (parameters only, from any
source ``zhlm.train.checkpoint.load`` reads; fresh optimizer) -> fresh init. A checkpoint that
cannot be restored (truncated by a crash, corrupted) is moved aside as ``corrupt-<step>`` with
a warning and the previous one is tried.

Saves are asynchronous (orbax copies the arrays to host memory before ``save`` returns, so the
next step may reuse the donated buffers), keep the last ``config.train.keep_checkpoints``.
"""

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath
from flax import traverse_util

from zhlm import workdir as layout
from zhlm.models import fit_vocab
from zhlm.train import checkpoint


def manager(workdir: str, config) -> ocp.CheckpointManager:
    options = ocp.CheckpointManagerOptions(
        max_to_keep=config.train.keep_checkpoints, create=True, enable_async_checkpointing=True
    )
    return ocp.CheckpointManager(layout.path(workdir, layout.CHECKPOINTS), options=options)


def save(mngr, state, loader_state: dict, force: bool = False):
    step = int(jax.device_get(state["step"]))
    args = ocp.args.Composite(
        state=ocp.args.StandardSave(state), loader=ocp.args.JsonSave(loader_state)
    )
    mngr.save(step, args=args, force=force)
    return step


def restore_latest(mngr, trainer):
    """``(state, loader_state)`` of the newest checkpoint that restores, or None."""
    abstract = trainer.abstract_state()
    for step in sorted(mngr.all_steps(), reverse=True):
        args = ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract), loader=ocp.args.JsonRestore()
        )
        try:
            restored = mngr.restore(step, args=args)
        except Exception as e:  # orbax and tensorstore raise many types for a broken folder
            logging.warning(
                "checkpoint %d in %s cannot be restored (%s: %s); moving it aside and trying "
                "the previous one",
                step, mngr.directory, type(e).__name__, str(e)[:300],
            )  # fmt: skip
            _move_aside(mngr, step)
            continue
        return restored.state, restored.loader
    return None


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
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(f"zhlm corrupt checkpoint {step}")
    mngr.reload()


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
        raise ValueError(
            f"init_from {path}: parameters do not fit config.model (set its dims to the "
            "checkpoint's):\n  " + "\n  ".join(errors[:20])
        )
    flat_sh = traverse_util.flatten_dict(shardings, sep="/")

    def put(key):
        x = np.asarray(flat[key], dtype=want[key].dtype)
        return jax.make_array_from_callback(x.shape, flat_sh[key], lambda index: x[index])

    return traverse_util.unflatten_dict({tuple(k.split("/")): put(k) for k in want})


def restore_or_init(mngr, trainer, loader, config):
    """The state to train from, following the restore order of the module docstring; sets the
    loader's position. Returns ``(state, where)``, ``where`` saying which source was used."""
    restored = restore_latest(mngr, trainer)
    if restored is not None:
        state, loader_state = restored
        loader.set_state(loader_state)
        return state, f"checkpoint at step {int(state['step'])}"
    state = trainer.init(jax.random.key(config.train.seed))
    if config.train.init_from:
        path = config.train.init_from
        loaded = checkpoint.load(path, config, config.train.seed)
        logging.info("init_from: %s", loaded.description)
        params = loaded.params
        abstract = trainer.abstract_state()["params"]
        state = dict(
            state,
            params=place_params(
                params, abstract, trainer.state_shardings["params"], path, trainer.model.config
            ),
        )
        return state, f"parameters of {path}"
    return state, "fresh initialisation"
