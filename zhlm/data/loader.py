"""Batches from a prepared dataset: ``tfds.data_source`` plus a deterministic mixture sampler.

Why our own sampler (not grain's ``IndexSampler``): the recipes mix sources with weights
(ERNIE 1.0: encyclopedia, news, forum), and the position in that mixture must be saved with the
checkpoint and restored exactly. The sampler's whole state is two numbers per source (how many
examples each source has served) plus the step, so it is small, exact and JSON.

Order: global batch ``step`` draws its rows' sources from ``default_rng([seed, step])`` with the
mixture weights; the n-th example a source serves is item ``n % size`` of that source's
permutation for epoch ``n // size`` (``default_rng([seed, source, epoch])``). Every process
computes the same global plan and reads only its rows ``[p * B/P, (p + 1) * B/P)``, so the
global batch is identical for any process count, and each process touches only its own records.

Held-out sequences: the last ``holdout`` records of every source (at most a fifth of it) never
enter the training plan; ``eval_batches()`` serves them in whole global batches, by source. The
records are in TFDS's shuffled order, so these are a random sample of the source's sequences,
not of its documents: a document (a dialogue) with several sequences can have some held out and
others trained on. For held-out documents, prepare them as a source of their own and give it
weight 0 in ``data.mixture``: a weight-0 source is evaluation-only, up to ``holdout`` of its
records held out (not a fifth) and none trained on.

Read-ahead (``read_ahead=N``, off by default): the next N batches are read by N threads while
the caller uses the current one. Measured with ``python tools/bench.py loader`` on a 2-CPU
machine it does not raise one process's rate: 0.5-0.6x of synchronous reads when the machine
was otherwise quiet (the decode holds the GIL), 1.8x only while other processes held the
CPUs; measure on the TPU host before turning it on. Plans are still drawn in order in the
caller's thread, and each batch in flight carries the sampler state after its plan, so
``get_state()`` is the position after the last batch *returned*, never after what was only
read ahead: resuming from it repeats the uninterrupted run exactly, with or without it.
"""

import collections
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from zhlm.errors import UserError


def dataset_dir(data_dir: str, config) -> str:
    """Where ``zhlm-prepare`` wrote the dataset for this config."""
    from zhlm.data.builder import ZhlmPretrain, builder_config_name

    name = builder_config_name(config.data, config.recipe)
    return os.path.join(data_dir, "zhlm_pretrain", name, str(ZhlmPretrain.VERSION))


def parse_mixture(mixture: str, sizes: dict) -> dict:
    """``"name:w,name:w"`` to normalised weights; empty means proportional to source size."""
    if not mixture:
        weights = {k: float(v) for k, v in sizes.items()}
    else:
        weights = {}
        for item in mixture.split(","):
            name, sep, w = item.partition(":")
            name = name.strip()
            if not sep or name not in sizes:
                raise UserError(
                    f"data.mixture item {item!r}: want name:weight, names {sorted(sizes)}"
                )
            weights[name] = float(w)
    total = sum(weights.values())
    if total <= 0 or any(w < 0 for w in weights.values()):
        raise UserError(f"data.mixture {mixture!r}: weights must be >= 0 with a positive sum")
    for name, w in weights.items():
        if w > 0 and sizes[name] == 0:
            raise UserError(f"data.mixture: source {name!r} has no examples")
    return {k: w / total for k, w in sorted(weights.items())}


class MixtureSampler:
    """Global (source, index) plan per step; see the module docstring."""

    def __init__(self, sizes: dict, weights: dict, global_batch: int, seed: int):
        self.sizes, self.seed, self.global_batch = sizes, seed, global_batch
        self.names = sorted(weights)
        self.p = np.array([weights[n] for n in self.names])
        self.step = 0
        self.served = dict.fromkeys(self.names, 0)
        self._perm_cache = {}

    def state(self) -> dict:
        return {"step": self.step, "served": dict(self.served)}

    def restore(self, state: dict):
        self.step = int(state["step"])
        self.served = {n: int(state["served"][n]) for n in self.names}

    def epoch(self, name: str) -> int:
        return self.served[name] // self.sizes[name] if self.sizes[name] else 0

    def _perm(self, name, epoch):
        key = (name, epoch)
        if key not in self._perm_cache:
            source = self.names.index(name)
            rng = np.random.default_rng([self.seed, source, epoch])
            self._perm_cache = {key: rng.permutation(self.sizes[name])}  # keep one per source
        return self._perm_cache[key]

    def next_plan(self) -> list[tuple[str, int]]:
        """The next global batch as ``(source, record index)`` rows; advances the state."""
        rng = np.random.default_rng([self.seed, self.step])
        choice = rng.choice(len(self.names), size=self.global_batch, p=self.p)
        plan = []
        for c in choice:
            name = self.names[c]
            n = self.served[name]
            plan.append((name, int(self._perm(name, n // self.sizes[name])[n % self.sizes[name]])))
            self.served[name] = n + 1
        self.step += 1
        return plan


class Loader:
    """Iterator of this process's share of each global batch (dict of int32 numpy arrays).

    ``get_state()``/``set_state()`` save and restore the position exactly (store it beside the
    train state). ``process_index``/``process_count`` default to JAX's. ``read_ahead``: how
    many batches threads read ahead (0: each batch read when asked for; see the module
    docstring); ``close()`` stops the threads.
    """

    def __init__(
        self,
        path: str,
        mixture: str,
        global_batch: int,
        seed: int = 0,
        process_index=None,
        process_count=None,
        holdout: int = 0,
        read_ahead: int = 0,
    ):
        import tensorflow_datasets as tfds

        if process_index is None or process_count is None:
            import jax

            process_index, process_count = jax.process_index(), jax.process_count()
        if global_batch % process_count:
            raise UserError(f"batch size {global_batch} not divisible by {process_count} processes")
        builder = tfds.builder_from_directory(path)
        self.sources = {name: builder.as_data_source(split=name) for name in builder.info.splits}
        total = {name: len(ds) for name, ds in self.sources.items()}
        eval_only = {name for name, w in parse_mixture(mixture, total).items() if w == 0}
        self.held = {
            name: min(holdout, n if name in eval_only else n // 5) for name, n in total.items()
        }
        self.sizes = {name: n - self.held[name] for name, n in total.items()}
        self.global_batch = global_batch
        self.sampler = MixtureSampler(
            self.sizes, parse_mixture(mixture, self.sizes), global_batch, seed
        )
        local = global_batch // process_count
        self.rows = slice(process_index * local, (process_index + 1) * local)
        self.info = builder.info
        if "fields" not in builder.info.metadata:
            raise UserError(
                f"{path}: a dataset of zhlm_pretrain {builder.info.version}, whose records are "
                "not one stacked array; prepare it again (zhlm-prepare)"
            )
        self.fields = tuple(builder.info.metadata["fields"])
        self.read_ahead = int(read_ahead)
        self._pool = ThreadPoolExecutor(self.read_ahead) if self.read_ahead > 0 else None
        self._ahead = collections.deque()  # (sampler state after the plan, future batch)
        self._state = self.sampler.state()  # after the last batch returned

    def __iter__(self):
        return self

    def __next__(self) -> dict:
        if self._pool is None:
            batch = self._read(self.sampler.next_plan()[self.rows])
            self._state = self.sampler.state()
            return batch
        while len(self._ahead) < self.read_ahead + 1:
            plan = self.sampler.next_plan()[self.rows]
            self._ahead.append((self.sampler.state(), self._pool.submit(self._read, plan)))
        state, future = self._ahead.popleft()
        batch = future.result()
        self._state = state
        return batch

    def _drop_read_ahead(self):
        for _, future in self._ahead:
            future.cancel()
        self._ahead.clear()

    def close(self):
        """Stops the read-ahead threads (batches in flight are dropped, the state kept)."""
        self._drop_read_ahead()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _read(self, plan):
        examples = [self.sources[name][i] for name, i in plan]
        arrays = np.stack([e["arrays"] for e in examples]).astype(np.int32, copy=False)
        batch = {name: arrays[:, i] for i, name in enumerate(self.fields)}
        for name in examples[0]:  # sentence_label; packed, instance_starts too ([B] or [B,K])
            if name != "arrays":
                batch[name] = np.array([e[name] for e in examples], np.int32)
        return batch

    def num_eval_batches(self) -> int:
        return sum(self.held.values()) // self.global_batch

    def eval_batches(self):
        """``(source, rows)``: this process's rows of each whole global batch of held-out
        records. A source's own records fill whole batches first (``source`` names it, so
        that the evaluation can report each source apart); what is left of every source is
        then pooled into mixed batches (``source`` None). As many batches as
        :meth:`num_eval_batches`."""
        size, left = self.global_batch, []
        for name in sorted(self.held):
            plan = [(name, self.sizes[name] + i) for i in range(self.held[name])]
            whole = len(plan) // size * size
            for b in range(0, whole, size):
                yield name, self._read(plan[b : b + size][self.rows])
            left += plan[whole:]
        for b in range(0, len(left) // size * size, size):
            yield None, self._read(left[b : b + size][self.rows])

    def get_state(self) -> dict:
        """The position after the last batch returned (not after what is read ahead)."""
        return {"step": self._state["step"], "served": dict(self._state["served"])}

    def set_state(self, state: dict):
        self._drop_read_ahead()
        self.sampler.restore(state)
        self._state = self.sampler.state()


def from_config(path: str, config, process_index=None, process_count=None, read_ahead=0) -> Loader:
    """The loader ``train_and_evaluate`` uses for the dataset at ``path``: mixture, batch
    size, seed and held-out count from the config; ``read_ahead`` as :class:`Loader`'s."""
    return Loader(
        path,
        config.data.mixture,
        config.train.batch_size,
        config.train.seed,
        process_index,
        process_count,
        holdout=config.train.eval_examples,
        read_ahead=read_ahead,
    )
