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
the uninterrupted one would have. A changed config or init is refused, naming the keys, and so
is a training or evaluation file whose content changed (``progress.json`` keeps a hash of each:
a file edited in place keeps its name and config, and its date says nothing of its content).
``results.json`` marks a finished run; ``progress/`` is removed once it is written.

What cannot continue stops in one line that names the file and the way forward: a
``progress.json`` that does not parse, a state or best-parameters folder missing or cut short
(only the last epoch's is kept, so there is no earlier one to fall back to: ``--overwrite``),
a full disk (what could not be written, the space a state takes and what is free; the last
finished epoch stays whole and the same command continues after it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import jax
import orbax.checkpoint as ocp

from zhlm import paths, run_files
from zhlm.errors import UserError
from zhlm.train import checkpoint, resume

STATE, BEST, TOP, FILE = "state", "best", "top", "progress.json"
# What to do when progress/ cannot be continued: it keeps only the last epoch's state.
START_ANEW = "pass --overwrite to start the run anew (progress/ keeps no earlier state)"
_CHUNK = 1 << 20  # bytes a file is hashed by: memory stays flat whatever its size


class FinishedRun(UserError):
    """The workdir holds a finished run and ``--overwrite`` was not given."""


class DamagedProgress(UserError):
    """A file of ``progress/`` is missing or does not read: the run cannot continue."""


class InputsChanged(UserError):
    """A training or evaluation file differs from the one the interrupted run read."""


def fingerprints(task) -> dict[str, str]:
    """``{path: hash of its content}`` of the task's training and evaluation files (each of a
    comma-separated list)."""
    listed = f"{task.train_file},{task.dev_file}".split(",")
    return {path: content_hash(path) for path in dict.fromkeys(p.strip() for p in listed) if path}


def content_hash(path: str) -> str:
    """BLAKE2b of a file's bytes, read a chunk at a time (a folder, as format ``datasets``
    reads: of its files' names and bytes); "" when nothing is there."""
    digest = hashlib.blake2b(digest_size=16)
    if os.path.isdir(path):
        files = sorted(
            os.path.relpath(os.path.join(folder, name), path)
            for folder, _, names in os.walk(path)
            for name in names
        )
    elif os.path.isfile(path):
        files = [""]
    else:
        return ""
    for name in files:
        digest.update(name.encode() + b"\0")
        with open(os.path.join(path, name) if name else path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


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
        self.identity = {
            "config": json.loads(config.to_json()),
            "init": init or None,
            "inputs": fingerprints(config.task),
        }
        self.runs: list[dict] = []  # finished seeds: summary without parameters
        self.top: int | None = None  # index in runs of the best finished seed (params in top/)
        # {seed, epoch, history, best: {scores, epoch} | None, state, best_params}: the folders
        # of its state and best parameters carry the epoch that wrote them, so that a kill
        # while one is written leaves the ones progress.json names intact.
        self.current: dict | None = None
        file = self.root / FILE
        if file.exists():
            try:
                saved = json.loads(file.read_text(encoding="utf-8"))
                self.runs, self.top, self.current = saved["runs"], saved["top"], saved["current"]
            except (ValueError, KeyError, TypeError) as e:  # cut short, emptied, overwritten
                why = f"{type(e).__name__}: {e}"[:200]
                raise DamagedProgress(f"{file} cannot be read ({why}); {START_ANEW}") from e
            _check_same(workdir, saved, self.identity, config)
            for name in self._named():
                if not (self.root / name).is_dir():
                    raise DamagedProgress(f"{self.root / name} is missing; {START_ANEW}")

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
        checkpoint.quiet_orbax()  # a failed read would print one traceback per array otherwise
        try:
            restored = ocp.StandardCheckpointer().restore(self.root / current["state"], target)
        except Exception as e:  # orbax and tensorstore raise many types for a broken folder
            folder = self.root / current["state"]
            raise DamagedProgress(f"{folder} {checkpoint.damage(e)}; {START_ANEW}") from e
        best = current["best"]
        if best is not None:
            params = self._params(current["best_params"])
            best = dict(best, params=params["params"])
        return restored, list(current["history"]), best

    def _params(self, name: str):
        try:
            return checkpoint.load_params(str(self.root / name), remedy=START_ANEW)[0]
        except FileNotFoundError as e:  # a file of the folder deleted
            raise DamagedProgress(f"{self.root / name} is incomplete ({e}); {START_ANEW}") from e

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
        return self._params(f"{TOP}-{self.top}")["params"]

    def remove(self) -> None:
        _remove(self.root)

    def _write(self):
        value = dict(self.identity, runs=self.runs, top=self.top, current=self.current)
        tmp = self.root / (FILE + ".tmp")
        tmp.write_text(json.dumps(value), encoding="utf-8")
        tmp.replace(self.root / FILE)
        _tidy(self.root, {FILE, *self._named()})

    def _named(self) -> list[str]:
        return _named(self.current, self.top)


def _named(current: dict | None, top: int | None) -> list[str]:
    """The folders ``progress.json`` names: the current seed's state and best parameters, the
    best finished seed's."""
    current = current or {}
    named = [current.get("state"), current.get("best_params")]
    return [n for n in (*named, None if top is None else f"{TOP}-{top}") if n]


def _tidy(root, named) -> None:
    """Removes what ``progress.json`` does not name: older epochs, and writes cut short."""
    for child in root.iterdir():
        if child.name not in named:
            _remove(child)


def _check_same(workdir, saved, identity, config):
    """Fails naming what differs when the interrupted run had another config or init, or read
    files whose content has since changed."""
    differs = []
    if saved.get("init") != identity["init"]:
        differs.append(f"--init: {saved.get('init')!r} -> {identity['init']!r}")
    differs += resume.config_changes(saved.get("config", {}), config)
    if differs:
        raise UserError(
            f"{workdir} holds an interrupted run of another config; continue it with the same "
            "flags, or pass --overwrite to start this one there: " + "; ".join(differs[:8])
        )
    for path, digest in (saved.get("inputs") or {}).items():
        if identity["inputs"].get(path, digest) != digest:
            raise InputsChanged(
                f"{path} has changed since the interrupted run in {workdir} read it (its "
                "content differs): put the original file back to continue that run, or pass "
                "--overwrite to start anew on this one"
            )


def full_disk(workdir: str, error: BaseException) -> UserError:
    """The one line for a run stopped by a full disk (``error``): what could not be written,
    the space a train state takes and what is free, and where the same command continues.
    Writes cut short are removed from ``progress/`` (they hold space, and nothing reads them);
    what ``progress.json`` names is whole."""
    root = run_files.path(workdir, run_files.PROGRESS)
    what, after, state = _unwritten(error) or _partial(root), "", None
    try:
        saved = json.loads((root / FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:  # no epoch finished: all of progress/ is cut short
        saved = {}
    except (OSError, ValueError):
        saved = None
    if isinstance(saved, dict) and root.is_dir():
        current, runs = saved.get("current"), saved.get("runs") or []
        _tidy(root, {FILE, *_named(current, saved.get("top"))})
        if current:
            state = root / current["state"]
            after = f"after epoch {current['epoch']} of seed {current['seed']}"
        elif runs:
            after = f"after its {len(runs)} finished seed(s)"
    needs = ""
    if state is not None and state.is_dir():
        needs = f"a train state takes {_megabytes(state):.1f} MB, "
    local = os.fspath(run_files.path(workdir))
    free = shutil.disk_usage(local).free / 1e6 if os.path.isdir(local) else 0.0
    then = f"continue {after}" if after else "start it (no epoch had finished)"
    return UserError(
        f"no space left in {workdir} to write {what or 'its files'} ({needs}{free:.1f} MB are "
        f"free): free space, then run the same command again to {then}"
    )


def _unwritten(error: BaseException | None) -> str:
    """The file an ``OSError`` in ``error``'s chain names, or ""."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.filename:
            return os.fspath(error.filename)
        error = error.__cause__ or error.__context__
    return ""


def _partial(root) -> str:
    """The folder orbax was writing when the disk filled (its temporary name), or ""."""
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        for candidate in (child, *(child.iterdir() if child.is_dir() else ())):
            name = candidate.name
            if ".orbax-checkpoint-tmp" in name:
                where = candidate.parent / name.split(".orbax-checkpoint-tmp")[0]
                return os.fspath(where)
    return ""


def _megabytes(folder) -> float:
    files = (os.path.join(d, f) for d, _, names in os.walk(os.fspath(folder)) for f in names)
    return sum(map(os.path.getsize, files)) / 1e6


def _remove(path) -> None:
    if path.exists():
        if paths.is_remote(path):
            path.rmtree()
        else:
            shutil.rmtree(path)
