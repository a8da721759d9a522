"""Metrics as sums and counts: the one convention of pretraining, evaluation and fine-tuning.

Why sums: a mean over a log window, an eval set, micro-batches or devices is right only when each
part weighs as many targets as it had; sums and counts add, means do not. A step returns, for
each objective ``name``, ``<name>_loss_sum`` and ``<name>_count`` (and ``<name>_correct`` where
it has an accuracy), built by :func:`objective`. :func:`add` adds those (and ``tokens``) over
steps and micro-batches and keeps the newest value of everything else (learning rate, gradient
norm); :func:`means` divides, once, when a line is logged. The objective ``total`` (the step's
loss, counted once per step or micro-batch) becomes the plain ``loss``.
"""

import jax.numpy as jnp

LOSS_SUM, CORRECT, COUNT = "_loss_sum", "_correct", "_count"
TOTAL = "total"  # the objective whose mean is reported as ``loss``
_ADDED = (LOSS_SUM, CORRECT, COUNT, "tokens")  # key endings that add; the rest are gauges


def objective(name: str, loss_sum, count, correct=None) -> dict:
    """The sums of one objective under the names :func:`add` and :func:`means` know."""
    out = {f"{name}{LOSS_SUM}": loss_sum, f"{name}{COUNT}": count}
    if correct is not None:
        out[f"{name}{CORRECT}"] = correct
    return out


def step_loss(loss) -> dict:
    """A per-step mean loss counted once: its mean over steps is the mean step loss."""
    return objective(TOTAL, loss, jnp.ones((), jnp.float32))


def is_added(key: str) -> bool:
    return key.endswith(_ADDED)


def add(acc: dict | None, metrics: dict) -> dict:
    """``acc`` plus one step's (or micro-batch's) ``metrics``; ``None`` starts a window."""
    if acc is None:
        return dict(metrics)
    return {k: acc[k] + v if is_added(k) else v for k, v in metrics.items()}


def means(metrics: dict) -> dict:
    """Sums and counts (added over any number of steps) -> ``<name>_loss`` and
    ``<name>_accuracy`` per objective, ``loss`` for ``total``; other keys are left out."""
    out = {}
    for key, count in metrics.items():
        if not key.endswith(COUNT):
            continue
        name, count = key[: -len(COUNT)], max(float(count), 1.0)
        out[f"{name}_loss"] = float(metrics[f"{name}{LOSS_SUM}"]) / count
        if f"{name}{CORRECT}" in metrics:
            out[f"{name}_accuracy"] = float(metrics[f"{name}{CORRECT}"]) / count
    if f"{TOTAL}_loss" in out:
        out["loss"] = out.pop(f"{TOTAL}_loss")
    return out
