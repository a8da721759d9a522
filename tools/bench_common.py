"""What ``tools/bench.py``, ``tools/bench_train.py`` and ``tools/reproduce_tables.py`` share: the
benchmark config, a median timer, the timing of a real train step and the loader's rate.

Why a module of its own: bench.py is the one command line and imports bench_train for the
``train`` subcommand, and the ``tpu_plan`` table needs the loader's rate measured in its own
run, so the pieces they share live here instead of one importing the other.
"""

import os
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


def worker_result(args, timeout=None) -> dict | None:
    """The JSON a ``tools/bench.py`` worker subcommand prints after ``RESULT``, run in a child
    process (``args``: the subcommand and its arguments); None when it ran past ``timeout``
    seconds."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, os.path.abspath(sys.argv[0]), *map(str, args)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.split("RESULT")[-1])


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


def loader_rate(
    recipe="macbert", seq=128, batch=256, inputs=(), seconds=5.0, data_dir=None, read_ahead=0
):
    """Records/s of one process reading ``zhlm.data.loader.Loader`` batches (all rows of each
    global batch: one host) from a dataset zhlm-prepare's code builds here for ``recipe`` at
    ``seq`` tokens, from ``inputs`` (paths or globs; default the People's Daily sample bundled
    in zhlm). Timed for about ``seconds`` after one warm-up pass over the records, so the
    files are in the page cache as they would be after the first minutes of a run.
    ``read_ahead``: batches the loader reads ahead in threads (0: synchronous)."""
    import shutil
    import tempfile

    from zhlm import config_files
    from zhlm.data import builder
    from zhlm.data import loader as loader_lib

    config = config_files.load(recipe, "tiny")
    config.data.max_seq_length = seq
    if not inputs:
        import zhlm

        here = os.path.dirname(os.path.abspath(zhlm.__file__))
        inputs = (os.path.join(here, "resources", "peoples_daily_199801_sample.txt"),)
    tmp = data_dir or tempfile.mkdtemp(prefix="zhlm-loader-")
    try:
        path = loader_lib.dataset_dir(tmp, config)
        if not os.path.exists(path):
            builder.prepare(config.data, config.recipe, list(inputs), tmp, progress=False)
        loader = loader_lib.Loader(
            path, "", batch, seed=0, process_index=0, process_count=1, read_ahead=read_ahead
        )
        records = sum(loader.sizes.values())
        for _ in range(max(1, records // batch)):  # warm-up: every record read once
            next(loader)
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < seconds:
            next(loader)
            n += 1
        elapsed = time.perf_counter() - t
        loader.close()
    finally:
        if data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return dict(
        records_per_second=n * batch / elapsed,
        batches=n,
        batch=batch,
        records=records,
        fields=list(loader.fields),
        recipe=recipe,
        seq=seq,
        read_ahead=read_ahead,
        path=path if data_dir else None,  # kept only when the caller gave the folder
    )
