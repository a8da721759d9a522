"""``train_and_evaluate(config, workdir)``: the pretraining loop ``zhlm-pretrain`` runs.

One loop for every recipe, one CPU or a TPU pod: the prepared dataset (found or prepared once,
``zhlm.data.cache``), this process's rows of each global batch made into one global array
(``jax.make_array_from_process_local_data``), the jitted sharded step, metrics at log steps,
evaluation on held-out sequences, asynchronous orbax checkpoints with the loader's position.

What it guarantees:
- Exact resume: state, data position and the per-step key (``fold_in(seed, step)``) are all in
  the checkpoint or derived from it, so a killed and restarted run repeats the uninterrupted
  run's losses bit for bit (on CPU).
- Preemption: SIGTERM (or, multi-host, JAX's preemption sync point) saves a checkpoint at the
  current step and returns cleanly.
- Non-finite loss: training stops with ``FloatingPointError`` naming the step. No checkpoint
  is written after it: a save happens only once that step's loss and gradient norm are known to
  be finite, so the last checkpoint is the last good one. The check is one step behind (it
  reads step t's loss after step t+1 is queued), so the device never idles for it.
- One run per workdir: a second run on a workdir in use stops before writing anything there
  (``zhlm.workdir_lock``); a run whose lock another run took over stops before its next write.
"""

import contextlib
import signal
import time

import jax
import numpy as np
from absl import logging

from zhlm import paths, run_files, workdir_lock
from zhlm.data import cache, dialogue
from zhlm.data import loader as data_loader
from zhlm.errors import UserError
from zhlm.train import checkpoint, curves, resume, sharding, sums
from zhlm.train import metrics as metrics_lib
from zhlm.train.step import make_trainer


def initialize_distributed(train):
    """``jax.distributed.initialize`` when ``config.train.distributed``; call before any JAX
    computation. Unset values are detected (Cloud TPU)."""
    if not train.distributed:
        return
    kwargs = {}
    if train.coordinator_address:
        kwargs["coordinator_address"] = train.coordinator_address
    if train.num_processes:
        kwargs["num_processes"] = train.num_processes
    if train.process_id >= 0:
        kwargs["process_id"] = train.process_id
    jax.distributed.initialize(**kwargs)


def global_batch(local: dict, mesh, batch_size: int) -> dict:
    """This process's rows -> global arrays split over the data axes of ``mesh``."""
    spec = sharding.batch_sharding(mesh)
    return {
        k: jax.make_array_from_process_local_data(spec, v, (batch_size,) + v.shape[1:])
        for k, v in local.items()
    }


class _Preemption:
    """SIGTERM sets a flag the loop polls; multi-host, JAX's preemption sync point decides, so
    every process saves at the same step."""

    def __init__(self, mngr):
        self.mngr, self.signalled, self._previous = mngr, False, None

    def __enter__(self):
        with contextlib.suppress(ValueError):  # not the main thread: no handler
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def _handle(self, signum, frame):
        logging.warning("SIGTERM: saving a checkpoint and stopping")
        self.signalled = True

    def __exit__(self, *exc):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def reached(self, step: int) -> bool:
        if jax.process_count() > 1:
            return self.mngr.reached_preemption(step)
        return self.signalled


class Diverged(UserError, FloatingPointError):
    """The loss or the gradient norm is no longer finite: the run stops, its last checkpoint
    (the last good one) kept. A ``FloatingPointError`` too."""


def _check_finite(m, step: int, last_saved):
    loss, norm = float(m["total_loss_sum"]), float(m["grad_norm"])
    if not (np.isfinite(loss) and np.isfinite(norm)):
        where = f"step {last_saved}" if last_saved is not None else "none written"
        raise Diverged(
            f"loss {loss} / gradient norm {norm} at step {step}: stopping; the last good "
            f"checkpoint is kept ({where})"
        )


class _Evaluator:
    """Held-out loss and accuracies: fixed masks (one key per eval batch), no dropout.

    Besides the means over every held-out sequence (``loss``, ``mlm_accuracy``,
    ``sentence_accuracy``: the names the contract keeps), each source gets its own means as
    ``<source>/<name>`` from whole batches of its own sequences, so that a mixture's NSP and
    DLM real/fake accuracies are not one blended number; with ``data.dialogue_sources`` the
    sentence head's sums are also split by objective: ``dlm_*`` over the dialogue sources and
    ``nsp_*`` (or ``sop_*``) over the text sources. Rows left over after a source's whole
    batches are pooled into mixed batches that count only in the overall means.
    """

    def __init__(self, trainer, loader, config):
        self.trainer, self.config = trainer, config
        self.rng = jax.random.fold_in(jax.random.key(config.train.seed), 0x7E57)
        self.batches = None
        self.loader = loader

    def __call__(self, params) -> dict:
        if self.batches is None:  # read once: the held-out set does not change
            self.batches = [
                (source, global_batch(b, self.trainer.mesh, self.config.train.batch_size))
                for source, b in self.loader.eval_batches()
            ]
        per_source, total = {}, None
        for i, (source, batch) in enumerate(self.batches):
            m = self.trainer.evaluate(params, batch, jax.random.fold_in(self.rng, i))
            total = sums.add(total, m)
            if source is not None:
                per_source[source] = sums.add(per_source.get(source), m)
        out = sums.means(jax.device_get(total))
        per_source = jax.device_get(per_source)
        for source, m in per_source.items():
            out.update({f"{source}/{k}": v for k, v in sums.means(m).items()})
        out.update(_by_objective(per_source, self.config.data))
        return out


def _by_objective(per_source: dict, data_config) -> dict:
    """The sentence head's means split into ``dlm_*`` (dialogue sources: real/fake) and
    ``nsp_*``/``sop_*`` (text sources); nothing without dialogue sources."""
    dialogue_sources = set(data_config.dialogue_sources)
    if not dialogue_sources:
        return {}
    text_name = "sop" if data_config.format == "sop" else "nsp"
    groups = {"dlm": None, text_name: None}
    keys = ("sentence_loss_sum", "sentence_count", "sentence_correct")
    for source, m in per_source.items():
        if "sentence_count" not in m:
            continue
        name = "dlm" if source in dialogue_sources else text_name
        part = {k.replace("sentence", name): m[k] for k in keys}
        groups[name] = sums.add(groups[name], part)
    out = {}
    for part in groups.values():
        if part is not None:
            out.update(sums.means(part))
    return out


def _log_line(window, seconds, steps, flops, peak):
    m = jax.device_get(window)
    out = sums.means(m)
    out.update(
        learning_rate=m["learning_rate"],
        grad_norm=m["grad_norm"],
        steps_per_second=steps / seconds,
        tokens_per_second=m["tokens"] / seconds,
        tokens_per_sec=m["tokens"] / seconds,  # DESIGN.md's contract name; both are written
    )
    if peak:
        out["mfu"] = flops * steps / seconds / peak
    return out


def train_and_evaluate(config, workdir: str):
    """Trains ``config`` in ``workdir`` (resuming what is there); returns the final state.
    Raises ``zhlm.workdir_lock.WorkdirLocked`` while another run holds ``workdir``."""
    dialogue.check_heads(config)
    initialize_distributed(config.train)
    with workdir_lock.hold(workdir, "zhlm-pretrain") as held:  # before anything is written
        return _train(config, workdir, held)


def _train(config, workdir: str, held: workdir_lock.Held):
    lead = jax.process_index() == 0
    root = paths.resolve(workdir)  # local, or gs:// (see zhlm.paths)
    root.mkdir(parents=True, exist_ok=True)
    init = resume.adopt_init(config, announce=lead)  # before the data and the model: theirs
    path = cache.ensure_dataset(config, progress=lead)
    loader = data_loader.from_config(path, config)
    trainer = make_trainer(config)
    checkpoint.quiet_orbax()
    mngr = resume.manager(workdir, config)
    state, where = resume.restore_or_init(mngr, trainer, loader, config, init)
    start = int(jax.device_get(state["step"]))
    if lead:  # only now: a checkpoint this config cannot continue keeps its config.json
        (root / run_files.CONFIG).write_text(config.to_json(indent=2))
    train = config.train
    logging.info("training %s from %s; dataset %s (%s)", config.recipe, where, path, loader.sizes)
    if lead:
        print(f"zhlm: {config.recipe} from {where}, steps {start}..{train.num_steps}", flush=True)
    evaluate = _Evaluator(trainer, loader, config)
    if train.eval_every and not loader.num_eval_batches():
        logging.warning("held-out set smaller than one batch: no evaluation")
    writer = metrics_lib.Writer(workdir, enabled=lead, start_step=start)
    rng = jax.random.key(train.seed)
    flops = train.batch_size * metrics_lib.train_flops_per_sequence(
        trainer.model.config, config.data.max_seq_length, config.masking.max_predictions_per_seq
    )
    peak = metrics_lib.peak_flops(config, jax.devices()[0]) * jax.device_count()
    last_saved = mngr.latest_step()
    from tqdm import tqdm

    bar = tqdm(total=train.num_steps, initial=start, unit="step", disable=not lead)
    window, previous, t0, w0 = None, None, time.time(), start
    can_evaluate = bool(train.eval_every and loader.num_eval_batches())
    report = {"train": None, "eval": None, "step": start, "began": time.time()}

    def evaluate_at(step):
        report["eval"] = evaluate(state["params"])
        writer.write(step, "eval", report["eval"])
        if lead:
            bar.write(f"zhlm: eval at step {step}: {_brief(report['eval'])}")

    if start == 0 and train.init_from and can_evaluate:
        evaluate_at(0)  # the loss the init starts from: shows that it took
    try:
        with _Preemption(mngr) as preemption:
            for step in range(start + 1, train.num_steps + 1):  # step: updates done after it
                batch = global_batch(next(loader), trainer.mesh, train.batch_size)
                state, m = trainer.step(state, batch, rng)
                if previous is not None:
                    _check_finite(previous, step - 1, last_saved)
                previous, window = m, sums.add(window, m)
                bar.update(1)
                report["step"] = step
                preempted = preemption.reached(step)
                last = step == train.num_steps
                logs = (train.log_every and step % train.log_every == 0) or last
                evaluates = can_evaluate and (step % train.eval_every == 0 or last)
                saves = step % train.checkpoint_every == 0 or last or preempted
                if logs or evaluates or saves:
                    held.check()  # a run whose workdir was taken over writes nothing more
                if logs:
                    line = _log_line(window, time.time() - t0, step - w0, flops, peak)
                    writer.write(step, "train", line)
                    bar.set_postfix(loss=f"{line['loss']:.3f}", refresh=False)
                    window, t0, w0, report["train"] = None, time.time(), step, line
                if evaluates:
                    evaluate_at(step)
                if saves:
                    _check_finite(m, step, last_saved)
                    last_saved = resume.save(mngr, state, loader.get_state(), force=preempted)
                if preempted:
                    logging.warning("preempted: saved step %d, stopping", step)
                    break
    finally:
        bar.close()
        writer.close()
        resume.wait_until_saved(mngr)
    if lead:
        logging.info("curves: %s", curves.plot(workdir))
        print(_summary(report, train.num_steps, last_saved, workdir), flush=True)
    return state


def _brief(m: dict) -> str:
    """The overall means of a metric line, as a person reads them."""
    keys = ("loss", "mlm_accuracy", "sentence_accuracy", "sbo_accuracy")
    return ", ".join(
        f"{k} {m[k]:.2%}" if "accuracy" in k else f"{k} {m[k]:.4f}" for k in keys if k in m
    )


def _summary(report: dict, num_steps: int, last_saved, workdir: str) -> str:
    minutes = (time.time() - report["began"]) / 60
    done = "finished" if report["step"] == num_steps else "stopped"
    parts = [f"zhlm: {done} at step {report['step']} of {num_steps} in {minutes:.1f} min"]
    if report["train"]:
        parts.append(f"last train {_brief(report['train'])}")
    if report["eval"]:
        parts.append(f"last eval {_brief(report['eval'])}")
    parts.append(f"checkpoint at step {last_saved} in {workdir}")
    return "; ".join(parts)
