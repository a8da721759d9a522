"""What an interrupted fine-tuning run continues from, and the refusal to overwrite a finished one.

Why: a fine-tuning of a base model on a large task runs for hours, several seeds one after the
other; a preemption or a closed laptop must cost at most the epoch in progress, and a second
``zhlm-finetune`` on a workdir that holds finished results must not silently replace them.

After every epoch the run writes ``progress/`` in its workdir (``zhlm.run_files.PROGRESS``):

* ``progress.json``: the config and init the run was started with, the finished seeds'
  summaries (metrics per epoch, best epoch and scores), and the current seed's epochs so far;
* ``state-<seed>-<epoch>/``: the current seed's train state after its last finished epoch
  (parameters, optimizer, step: dropout and the learning rate continue exactly);
* ``best-<seed>-<epoch>/``: the current seed's best parameters so far; ``top-<n>/``: the best
  finished seed's.

The same command then continues after the last finished epoch: the training order of the
epochs done is replayed from the seed (it costs nothing), so the continued run computes what
the uninterrupted one would have. A changed config or init is refused, naming the keys.
``results.json`` marks a finished run; ``progress/`` is removed once it is written.
"""

from __future__ import annotations

import json
import shutil

import jax
import orbax.checkpoint as ocp

from zhlm import paths, run_files
from zhlm.errors import UserError
from zhlm.train import checkpoint, resume

STATE, BEST, TOP, FILE = "state", "best", "top", "progress.json"


class FinishedRun(UserError):
    """The workdir holds a finished run and ``--overwrite`` was not given."""


def check_overwrite(workdir: str, overwrite: bool) -> None:
    """Refuses a workdir with ``results.json`` unless ``overwrite``; with it, removes the old
    results and any progress of an interrupted run, so that the new run starts clean."""
    root = run_files.path(workdir)
    results = root / run_files.RESULTS
    if overwrite:
        if results.exists():
            results.unlink()
        _remove(root / run_files.PROGRESS)
        return
    if results.exists():
        try:
            done = json.loads(results.read_text(encoding="utf-8"))
            what = f"{done['task']}: dev {done['metric']} max {done['max']:.2f}"
        except (ValueError, KeyError, TypeError):
            what = run_files.RESULTS
        raise FinishedRun(
            f"{workdir} holds a finished run ({what}): pass --overwrite to replace it, or "
            "give another --workdir"
        )


class Progress:
    """The ``progress/`` folder of one workdir (see the module docstring)."""

    def __init__(self, workdir: str, config, init: str | None):
        self.root = run_files.path(workdir, run_files.PROGRESS)
        self.config = config
        self.identity = {"config": json.loads(config.to_json()), "init": init or None}
        self.runs: list[dict] = []  # finished seeds: summary without parameters
        self.top: int | None = None  # index in runs of the best finished seed (params in top/)
        # {seed, epoch, history, best: {scores, epoch} | None, state, best_params}: the folders
        # of its state and best parameters carry the epoch that wrote them, so that a kill
        # while one is written leaves the ones progress.json names intact.
        self.current: dict | None = None
        file = self.root / FILE
        if file.exists():
            saved = json.loads(file.read_text(encoding="utf-8"))
            _check_same(workdir, saved, self.identity, config)
            self.runs, self.top, self.current = saved["runs"], saved["top"], saved["current"]

    @property
    def resumed(self) -> bool:
        return bool(self.runs or self.current)

    def epochs_kept(self) -> dict[int, int]:
        """Per seed, the epochs whose records a continued run keeps: a finished seed's all,
        the current seed's finished ones (empty for a new run)."""
        kept = {run["seed"]: len(run["history"]) for run in self.runs}
        if self.current:
            kept[self.current["seed"]] = self.current["epoch"]
        return kept

    def epochs_done(self, seed: int) -> int:
        """How many epochs of ``seed`` are done (0 unless it is the current seed)."""
        return self.current["epoch"] if self.current and self.current["seed"] == seed else 0

    def restore(self, state):
        """``(state, history, best)`` of the current seed's last finished epoch, ``state`` (a
        fresh one) giving the shapes and shardings; ``best`` holds ``params`` when there is
        one."""
        target = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
        )
        current = self.current
        restored = ocp.StandardCheckpointer().restore(self.root / current["state"], target)
        best = current["best"]
        if best is not None:
            params = checkpoint.load_params(str(self.root / current["best_params"]))[0]
            best = dict(best, params=params["params"])
        return restored, list(current["history"]), best

    def save_epoch(self, seed: int, epoch: int, state, history: list, best, improved: bool):
        """Writes what continuing after ``epoch`` of ``seed`` needs, ``progress.json`` last,
        then removes what it no longer names."""
        self.root.mkdir(parents=True, exist_ok=True)
        saver = ocp.StandardCheckpointer()
        state_dir = f"{STATE}-{seed}-{epoch}"
        saver.save(self.root / state_dir, state, force=True)
        saver.wait_until_finished()
        best_dir = (self.current or {}).get("best_params") if self.epochs_done(seed) else None
        if improved:
            best_dir = f"{BEST}-{seed}-{epoch}"
            checkpoint.save_params(
                str(self.root / best_dir), {"params": best["params"]}, self.config
            )
        summary = {"scores": best["scores"], "epoch": best["epoch"]} if best else None
        self.current = dict(
            seed=seed, epoch=epoch, history=history, best=summary, state=state_dir,
            best_params=best_dir,
        )  # fmt: skip
        self._write()

    def finish_seed(self, run: dict, metric: str) -> None:
        """Records a finished seed; its parameters become ``top/`` when it is the best yet."""
        summary = {k: v for k, v in run.items() if k != "params"}
        best = self.top is None or run["scores"][metric] > self.runs[self.top]["scores"][metric]
        if best:
            self.root.mkdir(parents=True, exist_ok=True)
            top_dir = f"{TOP}-{len(self.runs)}"
            checkpoint.save_params(str(self.root / top_dir), {"params": run["params"]}, self.config)
            self.top = len(self.runs)
        self.runs.append(summary)
        self.current = None
        self._write()

    def top_params(self):
        return checkpoint.load_params(str(self.root / f"{TOP}-{self.top}"))[0]["params"]

    def remove(self) -> None:
        _remove(self.root)

    def _write(self):
        value = dict(self.identity, runs=self.runs, top=self.top, current=self.current)
        tmp = self.root / (FILE + ".tmp")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        tmp.replace(self.root / FILE)
        named = {FILE, (self.current or {}).get("state"), (self.current or {}).get("best_params")}
        named.add(None if self.top is None else f"{TOP}-{self.top}")
        for child in self.root.iterdir():
            if child.name not in named:
                _remove(child)


def _check_same(workdir, saved, identity, config):
    """Fails naming what differs when the interrupted run had another config or init."""
    differs = []
    if saved.get("init") != identity["init"]:
        differs.append(f"--init: {saved.get('init')!r} -> {identity['init']!r}")
    differs += resume.config_changes(saved.get("config", {}), config)
    if differs:
        raise UserError(
            f"{workdir} holds an interrupted run of another config; continue it with the same "
            "flags, or pass --overwrite to start this one there: " + "; ".join(differs[:8])
        )


def _remove(path) -> None:
    if path.exists():
        if paths.is_remote(path):
            path.rmtree()
        else:
            shutil.rmtree(path)
