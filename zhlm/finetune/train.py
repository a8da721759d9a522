"""``finetune(config, init, workdir)``: train a task head on a pretrained encoder, keep the best.

The recipe of the BERT, Chinese-BERT-wwm and MacBERT papers: AdamW, linear warmup over the first
``optim.warmup_ratio`` of the steps (or ``optim.warmup_steps`` when given) then linear decay to
0, a few epochs, the dev metric after every epoch with the best epoch kept, and several seeds
reported as max and mean (fine-tuning on small sets varies more between seeds than between
many of the models compared).

Shapes are static and few. Packed (``task.pack``, the default, for the kinds that read packed
rows out: :mod:`zhlm.finetune.packing`), each epoch's shuffled examples are packed several a
row and every step has the same number of rows, holding about ``train.batch_size`` examples:
one train-step program and one forward program per run. The loss is a sum over the step's
real examples (NER: labelled tokens) divided by their count, and the learning-rate schedule
counts steps, as many in every epoch. Otherwise (``task.pack`` False, MRC, multiple choice)
every batch has ``train.batch_size`` rows of one length bucket (:mod:`zhlm.finetune.batching`:
the rows' real lengths pick one of a few lengths known up front), the last batch of each bucket
padded with rows of weight 0 that count in neither the loss nor the metrics, so each jitted
function compiles once per bucket with rows, all in the first epoch. The training order (the
examples' shuffle, and for buckets the batches') is a function of the seed. The train step is
one jitted pure function that donates the state and draws dropout from ``fold_in(key, step)``;
the seeds share the compiled functions.

Files in ``workdir`` (named in ``zhlm.run_files``): ``results.json`` (also returned),
``config.json``, ``metrics.jsonl`` (one split per seed over its steps, as pretraining's: the loss
and learning rate every ``train.log_every`` steps, and at each epoch's end its train loss, learning
rate, dev metrics and speed; TensorBoard events under ``tensorboard/``) drawn as ``curves.png``,
``best/`` (the best run's parameters: a parameter checkpoint that
:func:`zhlm.finetune.saved.load_finetuned`, ``--init`` and ``zhlm-convert --to=hf`` read), and the
best run's dev predictions: for MRC ``predictions_dev.json`` (``{qid: answer}``) with
``eval_set.json``, the evaluated questions in SQuAD layout, so that ``zhlm-cmrc-eval
workdir/eval_set.json workdir/predictions_dev.json`` reproduces the F1; for NER
``predictions_dev.jsonl`` (entity spans with their text) and the best run's scores by entity type
in ``results.json``.

Before training, two diagnostics are printed and kept in ``results.json``
(:mod:`zhlm.finetune.diagnose`): the loss of predicting the label prior, where a run that uses
nothing of its input stays, and, for a pretrained init, how much of its encoder output's
variance lies along one direction: near all of it means the init's token representations have
collapsed (a warning says so).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from tqdm import tqdm

from zhlm import paths, run_files, workdir_lock
from zhlm.errors import UserError
from zhlm.finetune import batching, diagnose, kinds, packing, saved, task_files
from zhlm.finetune import progress as progress_lib
from zhlm.models import dropout_rngs, model_config
from zhlm.train import checkpoint, curves, resume, sharding, step, sums
from zhlm.train import metrics as metrics_lib
from zhlm.train.optim import make_optimizer

LOSS = "task"  # the objective's name in the step's sums (zhlm.train.sums)


def finetune(
    config: ml_collections.ConfigDict, init: str | None, workdir: str, overwrite: bool = False
) -> dict:
    """Runs ``config.train.seeds`` fine-tuning runs from ``init`` (a zhlm checkpoint, pretrain
    workdir or HF folder; None: random encoder) and returns what ``results.json`` holds. An
    interrupted run in ``workdir`` is continued after its last finished epoch; a finished one
    is refused unless ``overwrite`` (:mod:`zhlm.finetune.progress`). Raises
    ``zhlm.workdir_lock.WorkdirLocked`` while another run holds ``workdir`` (``WorkdirLost``
    once another run took it over), and one ``UserError`` line for a full disk."""
    with workdir_lock.hold(workdir, "zhlm-finetune") as held:  # before anything is written
        progress_lib.check_overwrite(workdir, overwrite)
        try:
            return _finetune(config, init, workdir, held)
        except Exception as e:
            if resume.out_of_space(e):
                raise progress_lib.full_disk(workdir, e) from e
            raise


def _finetune(config, init: str | None, workdir: str, held: workdir_lock.Held) -> dict:
    started = time.time()
    checkpoint.quiet_orbax()  # a failed save or read is reported once, in one line
    config = config.copy_and_resolve_references()
    settle_warmup(config.optim)
    root = run_files.path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    loaded = _pretrained(config, init)
    init_from = loaded.description if loaded else "random initialisation"
    tokenizer = task_files.load_tokenizer(config.task, loaded)
    kind = kinds.get(config.task.kind)
    data = _Data(config, kind, tokenizer)
    _check_fits(config, tokenizer)
    # The config as the data settled it: an interrupted run's must be the same, and so must its
    # files' content; refused here, before anything compiles.
    progress = progress_lib.Progress(workdir, config, init)
    train = config.train
    steps_per_epoch = data.train_batches.num_batches(train.batch_size)
    num_steps = train.epochs * steps_per_epoch
    if config.optim.warmup_steps >= num_steps:
        raise UserError(
            f"optim.warmup_steps={config.optim.warmup_steps} is not shorter than the run's "
            f"{num_steps} steps ({train.epochs} epoch(s) of {steps_per_epoch} batches of "
            f"{train.batch_size}): give fewer warmup steps, or -1 for optim.warmup_ratio"
        )
    trainer = task_trainer(config, kind, num_steps)
    print(
        f"zhlm-finetune: {config.task.name} ({config.task.kind}) from {init_from}: "
        f"{data.num_train} training rows, {num_steps} steps (warmup "
        f"{warmup_steps(config.optim, num_steps)}), {train.seeds} seed(s)",
        flush=True,
    )
    print(
        f"zhlm-finetune: {data.train_description} in training, {data.eval_description} in "
        f"evaluation: {data.train_batches.programs} train-step and {data.eval_programs} "
        "forward programs",
        flush=True,
    )
    loaded_params = None if loaded is None else _init_params(loaded, kind, config.task)
    first_rows = np.arange(min(train.batch_size, data.num_train))
    first = next(batching.batches(data.train, train.batch_size, first_rows))
    encode = None if loaded_params is None else functools.partial(encoder(trainer), loaded_params)
    diagnosis = diagnose.diagnose(kind.chance(data.train).get("loss"), first, encode)
    # metrics.jsonl and TensorBoard, one split per seed; a new run starts the file afresh, a
    # continued one keeps the steps of the epochs it does not run again.
    kept = {_split(seed): n * steps_per_epoch for seed, n in progress.epochs_kept().items()}
    writer = metrics_lib.Writer(workdir, start_step=kept)
    try:
        for i in range(len(progress.runs), train.seeds):
            seed = train.seed + i
            run = _run(seed, config, kind, data, trainer, loaded_params, (writer, progress, held))
            progress.finish_seed(run, kind.metric)
    finally:
        writer.close()
    held.check()
    (root / run_files.CONFIG).write_text(config.to_json(indent=2))
    results = _summary(config, kind, init, init_from, data, progress.runs)
    results.update(diagnosis)
    results["devices"] = int(trainer.mesh.size)
    results["curves"] = curves.plot(workdir)
    top_params = progress.top_params()
    _, predictions = _evaluate(top_params, config, kind, data, trainer)
    results.update(_write_best(config, kind, data, top_params, predictions, root, tokenizer))
    results["seconds"] = round(time.time() - started, 1)
    paths.write_json(root / run_files.RESULTS, results)
    progress.remove()
    print(
        f"zhlm-finetune: {config.task.name} dev {results['metric']} max {results['max']:.2f} "
        f"mean {results['mean']:.2f} over {len(progress.runs)} seed(s); {root / run_files.RESULTS}",
        flush=True,
    )
    if results.get("at_majority_rate"):
        print(
            "zhlm-finetune: warning: no seed beat the majority class "
            f"({results['majority_rate']:.2f}% of the dev set): the model learned nothing "
            "usable; try a higher "
            "--config.optim.peak_lr, more epochs, or a pretrained --init",
            flush=True,
        )
    return results


def _pretrained(config, init) -> checkpoint.Loaded | None:
    """What ``init`` holds (``config.model`` becomes its architecture), or None: random."""
    if not init:
        print(
            "zhlm-finetune: warning: no --init, the encoder starts from random weights "
            f"(config.model.size={config.model.size!r})",
            flush=True,
        )
        return None
    loaded = checkpoint.load(init, None, config.train.seed)
    checkpoint.adopt_model(config, loaded.config.model)
    return loaded


def _check_fits(config, tokenizer):
    for key in ("epochs", "seeds", "batch_size"):
        if config.train[key] < 1:
            raise UserError(f"config.train.{key}={config.train[key]} must be at least 1")
    if config.task.max_seq_length > config.model.max_position_embeddings:
        raise UserError(
            f"task.max_seq_length={config.task.max_seq_length} exceeds the model's "
            f"max_position_embeddings={config.model.max_position_embeddings}: pass "
            f"--config.task.max_seq_length={config.model.max_position_embeddings} or less"
        )
    if tokenizer.vocab_size > config.model.vocab_size:
        raise UserError(
            f"the vocab has {tokenizer.vocab_size} tokens, the model only "
            f"{config.model.vocab_size} word embeddings: use the vocabulary the model was "
            "trained with (config.task.vocab; an --init brings its own)"
        )


class _Data:
    """Both splits read, reported and featurized: ``train`` the device arrays, ``eval`` the
    evaluation features (``eval.arrays`` on the device, the rest for decoding); and which of
    their shapes have compiled, so that the run can say when it is compiling."""

    def __init__(self, config, kind, tokenizer):
        task, limits = config.task, config.train
        train, evaluation, self.reports = task_files.read_task(kind, task)
        learned = kind.training_examples(task, train)
        self.left_out_of_training = len(train) - len(learned)  # e.g. MRC answers not located
        train = learned[: limits.max_train_examples or None]
        self.examples = evaluation[: limits.max_eval_examples or None]
        if not train or not self.examples:
            raise UserError(
                f"{task.name}: no usable training or evaluation examples: check "
                "config.task.train_file and dev_file (or holdout), and the reports above"
            )
        self.num_train_examples = len(train)
        self.train = kind.featurize(train, tokenizer, task, training=True).arrays
        self.eval = kind.featurize(self.examples, tokenizer, task, training=False)
        self.num_train = len(self.train["input_ids"])
        # How rows are batched: packed (zhlm.finetune.packing) or in length buckets.
        if packing.packs(kind, task):
            seeds = [limits.seed + i for i in range(limits.seeds)]
            multiple = limits.micro_batches * _data_parallel(config)
            self.train_batches = packing.Epochs(
                self.train, limits.batch_size, kind.readout, seeds, limits.epochs, multiple
            )
            self.train_description = self.train_batches.describe()
            lengths = batching.row_lengths(self.eval.arrays)
            layout = packing.Layout.of(lengths, task.max_seq_length)
            self.eval_description = (
                f"{layout.num_rows} packed rows ({layout.real_token_fraction():.0%} real tokens)"
            )
            self.eval_programs = 1
        else:
            self.train_batches = batching.Buckets.of(self.train, task.length_buckets)
            self.train_description = f"length buckets {self.train_batches.describe()}"
            eval_buckets = batching.Buckets.of(self.eval.arrays, task.length_buckets)
            self.eval_description = f"length buckets {eval_buckets.describe()}"
            self.eval_programs = eval_buckets.programs
        # What this process has compiled (the seeds share the programs): the train step's
        # lengths so far, and whether the forward programs have run.
        self.compiled: set[int] = set()
        self.evaluated = False


def _data_parallel(config) -> int:
    """The devices a batch's rows are split over on this machine's mesh (data x fsdp)."""
    names, sizes = sharding.mesh_shape(config, jax.device_count())
    return sizes[names.index("data")] * sizes[names.index("fsdp")]


def task_trainer(config, kind, num_steps: int, mesh=None) -> step.Trainer:
    """The task model's trainer, built by the pretraining step's machinery
    (:func:`zhlm.train.step.build_trainer`: mesh, checks, abstract init, shardings, jitted and
    donating ``train_step``): data-parallel over ``config.train.mesh`` (every local device by
    default). The ``kind`` gives the model, its example inputs, the per-row loss and what the
    forward pass returns. The loss weighs each row by ``batch["weight"]`` (0: padding) and is a
    mean over real targets; dropout draws from the step's key as it is (nothing else is random,
    so it is not split)."""
    model = kind.model(model_config(config.model), config.task)
    optim = ml_collections.ConfigDict(config.optim.to_dict())
    optim.warmup_steps = warmup_steps(config.optim, num_steps)

    def apply(params, batch, deterministic, rng=None):
        rngs = None if rng is None else dropout_rngs(rng, model.config)
        return model.apply(
            {"params": params},
            *batching.model_inputs(batch),
            deterministic,
            rngs=rngs,
            **batching.packed_inputs(batch),
        )

    def loss(params, batch, rng, deterministic=False):
        outputs = apply(params, batch, deterministic, None if deterministic else rng)
        row_sum, row_count = kind.loss(outputs, batch)
        total = jnp.sum(row_sum * batch["weight"])
        count = jnp.sum(row_count * batch["weight"])
        return total / jnp.maximum(count, 1.0), sums.objective(LOSS, total, count)

    return step.build_trainer(
        config,
        sharding.create_mesh(config) if mesh is None else mesh,
        model,
        kind.example_inputs(config.task),
        loss,
        # The parameter tree decides which leaves decay, so the optimizer is built for it.
        lambda params: make_optimizer(optim, num_steps, params),
        lambda params, batch: kind.device_outputs(apply(params, batch, True), batch),
    )


def settle_warmup(optim) -> None:
    """Which of ``optim.warmup_steps`` and ``optim.warmup_ratio`` sets the warmup: steps when
    given (>= 0; the ratio is then set to 0, so config.json shows what ran, and the log says
    so), else the ratio (steps -1); anything else is refused."""
    if optim.warmup_steps < -1 or not 0 <= optim.warmup_ratio < 1:
        raise UserError(
            f"optim.warmup_steps={optim.warmup_steps}, optim.warmup_ratio={optim.warmup_ratio}: "
            "give warmup_steps >= 0, or -1 and a warmup_ratio in [0, 1)"
        )
    if optim.warmup_steps >= 0 and optim.warmup_ratio:
        print(
            f"zhlm-finetune: warmup over optim.warmup_steps={optim.warmup_steps} steps, not "
            f"optim.warmup_ratio={optim.warmup_ratio} of them (set to 0 in config.json)",
            flush=True,
        )
        optim.warmup_ratio = 0.0


def warmup_steps(optim, num_steps: int) -> int:
    """The warmup of a run of ``num_steps``: ``optim.warmup_steps`` when >= 0, else
    ``optim.warmup_ratio`` of the steps (rounded, and short of the last step)."""
    if optim.warmup_steps >= 0:
        return int(optim.warmup_steps)
    return min(int(round(optim.warmup_ratio * num_steps)), max(num_steps - 1, 0))


def encoder(trainer: step.Trainer):
    """``(params, batch) -> [..., S, H]``: the encoder's sequence output, no dropout, for inputs
    of any leading shape (a multiple-choice batch is [B, C, S]: its options go through the
    encoder as [B*C, S], as its model sends them); ``params`` need only the embeddings and the
    encoder (a pretrained tree, without a task head, will do)."""

    def encode(params, batch):
        params = {k: params[k] for k in ("embeddings", "encoder")}
        inputs = batching.model_inputs(batch)
        shape = inputs[0].shape
        flat = [x.reshape(-1, shape[-1]) for x in inputs]
        out = trainer.model.apply({"params": params}, *flat, True, method="encode")
        return out.reshape(*shape, out.shape[-1])

    jitted = jax.jit(encode)

    def run(params, batch):
        with trainer.scope():
            return jitted(params, batch)

    return run


def _init_params(loaded: checkpoint.Loaded, kind, task) -> dict:
    """The init's parameters, with its task head only where that head may serve this task: a
    zhlm fine-tuned model's when it was trained for the same kind and labels (a two-class
    sentiment head never starts a two-class NLI task), a Hugging Face folder's when it fits."""
    params = loaded.with_task_heads()
    trained_for = loaded.config.get("task")
    if trained_for is not None and (
        trained_for.kind != task.kind or tuple(trained_for.labels) != tuple(task.labels)
    ):
        params.pop(kind.export.head, None)
    return params


def _run(seed, config, kind, data, trainer, loaded_params, out) -> dict:
    """One seed: train ``train.epochs`` epochs (after those ``progress`` has done), evaluating
    as configured, saving the progress after each; the best epoch's metrics and host
    parameters. ``out``: the metrics writer, the progress and the workdir's lock, checked
    before each epoch's writes."""
    writer, progress, held = out
    train = config.train
    init_key, dropout_key = jax.random.split(jax.random.key(seed))
    inputs = kind.example_inputs(config.task)
    model_params = saved.init_params(trainer.model, init_key, inputs)
    params, left_fresh = model_params, sorted(model_params)
    if loaded_params is not None:
        params, left_fresh = saved.merge(model_params, loaded_params, kind.export.head)
    state = trainer.state_from(params)  # a copy: it is donated, and the seeds share ``params``
    order_rng = np.random.RandomState(seed)
    best, history, done = None, [], progress.epochs_done(seed)
    if done:
        state, history, best = progress.restore(state)
        for _ in range(done):  # the finished epochs' orders, so the next epoch's is the same
            data.train_batches.plan(train.batch_size, order_rng)
        print(f"zhlm-finetune: seed {seed} continues after epoch {done}", flush=True)
    for epoch in range(done + 1, train.epochs + 1):
        epoch_sums, window, began = None, None, time.monotonic()
        plan = data.train_batches.plan(train.batch_size, order_rng)
        first_step = (epoch - 1) * len(plan)  # the steps of each epoch are as many
        desc = f"seed {seed} epoch {epoch}/{train.epochs}"
        batches = tqdm(
            (data.train_batches.batch(data.train, entry, train.batch_size) for entry in plan),
            total=len(plan),
            desc=desc,
            unit="step",
            leave=False,
        )
        for i, batch in enumerate(batches, 1):
            compiling = _compiling(batches, desc, data, batch)
            state, metrics = trainer.step(state, batch, dropout_key)
            if compiling:  # the call returns once its program is built, before it has run
                batches.set_description(desc, refresh=False)
            epoch_sums, window = sums.add(epoch_sums, metrics), sums.add(window, metrics)
            if train.log_every and (first_step + i) % train.log_every == 0:
                held.check()  # nothing more is written into a workdir another run took over
                line = _train_line(window)  # fetched: a log step
                if i < len(plan):  # the epoch's own line holds its last step
                    writer.write(first_step + i, _split(seed), line)
                batches.write(
                    f"  seed {seed} epoch {epoch} step {first_step + i}: loss "
                    f"{line['train_loss']:.4f}, learning rate {line['learning_rate']:.3g}"
                )
                window = None
        record = {"epoch": epoch, **_train_line(epoch_sums)}  # fetched: the epoch is done
        speed = _throughput(data, train.batch_size, time.monotonic() - began)
        improved = False
        if train.eval_every_epoch or epoch == train.epochs:
            if not data.evaluated:
                data.evaluated = True
                print(
                    f"zhlm-finetune: compiling {data.eval_programs} forward program(s) "
                    "for the first evaluation",
                    flush=True,
                )
            scores, _ = _evaluate(state["params"], config, kind, data, trainer)
            record.update(scores)
            if best is None or scores[kind.metric] > best["scores"][kind.metric]:
                best = dict(scores=scores, epoch=epoch, params=jax.device_get(state["params"]))
                improved = True
        history.append(record)
        held.check()  # nothing more is written into a workdir another run took over
        writer.write(first_step + len(plan), _split(seed), {**record, **speed})
        scalars = {k: v for k, v in record.items() if k not in ("epoch", "learning_rate")}
        shown = ", ".join(f"{k} {v:.4f}" for k, v in scalars.items() if "/" not in k)
        shown += (
            f" ({speed['examples_per_second']:.0f} examples/s, real tokens "
            f"{speed['real_token_fraction']:.0%} of those computed)"
        )
        print(f"zhlm-finetune: seed {seed} epoch {epoch}/{train.epochs}: {shown}", flush=True)
        progress.save_epoch(seed, epoch, state, history, best, improved)
    return dict(seed=seed, history=history, fresh=left_fresh, **best)


def _split(seed: int) -> str:
    """A seed's split in ``metrics.jsonl`` and TensorBoard."""
    return f"seed{seed}"


def _compiling(bar, desc: str, data, batch) -> bool:
    """Whether ``batch``'s train step compiles now (its length is new in this process); if so,
    the bar says so while it does, with how many programs the run builds in all (the first
    epoch stands at a step for as long as each takes)."""
    length = batch["input_ids"].shape[-1]
    if length in data.compiled:
        return False
    data.compiled.add(length)
    bar.set_description(
        f"{desc}, compiling the train step for length {length} "
        f"({len(data.compiled)} of {data.train_batches.programs} programs)"
    )
    return True


def _throughput(data, batch_size: int, seconds: float) -> dict:
    """An epoch's training speed (first epoch: compilation included) for ``metrics.jsonl``:
    examples and real tokens per second, and the share of the computed positions (each batch
    at its bucket's length, filled batches included) that are real tokens."""
    real = int(np.sum(data.train["attention_mask"]))
    computed = data.train_batches.computed_positions(batch_size)
    return dict(
        examples_per_second=data.num_train_examples / seconds,
        tokens_per_second=real / seconds,
        real_token_fraction=real / computed,
    )


def _train_line(window) -> dict:
    """The mean train loss of a window of steps and the learning rate of its last step."""
    fetched = jax.device_get(window)
    return {
        "train_loss": sums.means(fetched)[f"{LOSS}_loss"],
        "learning_rate": float(fetched["learning_rate"]),
    }


def _evaluate(params, config, kind, data, trainer) -> tuple[dict, object]:
    """Dev metrics (percent) and the kind's predictions."""
    forward = functools.partial(trainer.forward, params)
    multiple = sharding.data_parallel(trainer.mesh)
    outputs = packing.forward_all(
        kind, config.task, forward, data.eval.arrays, config.train.batch_size, multiple
    )
    predictions = kind.decode(data.eval, outputs, data.examples, config.task)
    return kind.score(data.eval, data.examples, predictions), predictions


def _summary(config, kind, init, init_from, data, runs) -> dict:
    """What results.json reports: per-seed metrics, max and mean, what the readers skipped."""
    values = [run["scores"][kind.metric] for run in runs]
    top = int(np.argmax(values))
    results = dict(
        task=config.task.name,
        kind=config.task.kind,
        metric=kind.metric,
        init=init or None,
        init_from=init_from,
        train_examples=data.num_train_examples,
        left_out_of_training=data.left_out_of_training,
        train_rows=data.num_train,
        eval_examples=len(data.examples),
        seeds=[
            dict(seed=r["seed"], best_epoch=r["epoch"], **r["scores"], epochs=r["history"])
            for r in runs
        ],
        max=max(values),
        mean=float(np.mean(values)),
        best_seed_index=top,
        skipped={r.path: r.dropped for r in data.reports},
        read_issues={r.path: dict(r.counts) for r in data.reports},
        fresh_parameters=runs[top]["fresh"],
    )
    results.update({k: v for k, v in kind.chance(data.eval.arrays).items() if k != "loss"})
    if "majority_rate" in results and results["max"] <= results["majority_rate"]:
        results["at_majority_rate"] = True  # no seed beat predicting the commonest class
    return results


def _write_best(config, kind, data, params, predictions, root, tokenizer) -> dict:
    """Writes the best run's dev predictions and its parameters with the vocabulary
    (``train.save_best``: ``best/`` is all ``zhlm-predict`` needs); returns their paths."""
    written = kind.write_dev(root, data.examples, predictions)
    if config.train.save_best:
        written["best"] = saved.save_finetuned(root / run_files.BEST, params, config)
        vocab = paths.resolve(tokenizer.vocab_path).read_bytes()
        run_files.path(written["best"], checkpoint.VOCAB).write_bytes(vocab)
    return written
