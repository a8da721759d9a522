"""What ``tools/bench.py`` and ``tools/bench_train.py`` both use: the benchmark config, a median
timer and the timing of a real train step.

Why a module of its own: bench.py is the one command line and imports bench_train for the
``train`` subcommand, so the pieces both need live here instead of one importing the other.
"""

import time

import jax
import numpy as np

from zhlm import defaults


def config(size, batch, seq, dtype="float32", layers=0, scheme="token"):
    """The base config at one size and shape, 15% of the positions predicted (BERT's 20 of 128).
    The schedule's length does not change what a step costs."""
    c = defaults.get_base_config()
    c.model.size, c.model.dtype, c.model.num_layers = size, dtype, layers
    c.train.batch_size, c.data.max_seq_length = batch, seq
    c.masking.scheme = scheme
    c.masking.replacement = "mac" if scheme == "correction" else "partial_mask"
    c.masking.max_predictions_per_seq = round(0.15 * seq)
    c.train.num_steps, c.optim.warmup_steps = 1000, 10
    return c


def median_seconds(run, reps, warmup=1):
    """Median wall time of ``run()`` over ``reps`` calls, after ``warmup`` untimed calls (compile,
    caches); ``run`` returns only once its work is done."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def step_seconds(trainer, batch, reps, warmup=2):
    """Median seconds of ``trainer.step`` (``zhlm.train.step.make_trainer``) on ``batch``, which
    is put on the device once. The state is threaded from step to step: the step donates it."""
    state = trainer.init(jax.random.key(0))
    batch, rng = jax.device_put(batch), jax.random.key(1)

    def run():
        nonlocal state
        state, metrics = trainer.step(state, batch, rng)
        jax.block_until_ready(metrics)

    return median_seconds(run, reps, warmup)
