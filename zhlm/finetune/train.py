"""``finetune(config, init, workdir)``: train a task head on a pretrained encoder, keep the best.

The recipe of the BERT, Chinese-BERT-wwm and MacBERT papers: AdamW, linear warmup over the first
``optim.warmup_ratio`` of the steps then linear decay to 0, a few epochs, the dev metric after
every epoch with the best epoch kept, and several seeds reported as max and mean (fine-tuning
on small sets varies more between seeds than between many of the models compared).

Shapes are static: every batch has ``train.batch_size`` rows, the last one padded with rows of
weight 0 that count in neither the loss nor the metrics, so each step compiles once. The train
step is one jitted pure function that donates the state and draws dropout from
``fold_in(key, step)``; the seeds share the compiled functions.

Files in ``workdir``: ``results.json`` (also returned), ``finetune_config.json``, ``best/`` (the
best run's parameters, :func:`load_finetuned`), and for MRC ``predictions_dev.json``
(``{qid: answer}``) with ``eval_set.json``, the evaluated questions in SQuAD layout, so that
``zhlm-cmrc-eval workdir/eval_set.json workdir/predictions_dev.json`` reproduces the F1.
"""

from __future__ import annotations

import json
import math
import os
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import orbax.checkpoint as ocp

from zhlm import defaults
from zhlm.finetune import heads, tasks
from zhlm.models import sizes
from zhlm.train.optim import make_optimizer

RESULTS, CONFIG, BEST = "results.json", "finetune_config.json", "best"
PREDICTIONS, EVAL_SET = "predictions_dev.json", "eval_set.json"
PRIMARY = {"classification": "accuracy", "pair": "accuracy", "mrc": "f1"}


def get_base_config(size: str = "base") -> ml_collections.ConfigDict:
    """Every fine-tuning key with its default; task files in configs/finetune change values.
    ``model`` and ``optim`` are zhlm.defaults' sections (documented there) plus the ratio;
    ``size`` (a zhlm.models.sizes name) is the random encoder's, used only without an init."""
    config = ml_collections.ConfigDict()
    config.task = ml_collections.ConfigDict(
        dict(
            name="",  # the task's name, for logs and results.json
            kind="classification",  # classification (one text), pair (two texts) or mrc (spans)
            format="sentence_tsv",  # reader: sentence_tsv, pair_tsv, pair_jsonl or squad
            train_file="",  # training data
            dev_file="",  # evaluation data (empty when holdout > 0)
            holdout=0.0,  # > 0: the last fraction of train_file (passages for mrc) evaluates
            labels=("0", "1"),  # label strings in the order of the classifier outputs (not mrc)
            max_seq_length=128,  # tokens per sequence including [CLS]/[SEP]
            doc_stride=128,  # mrc: tokens between the starts of consecutive context windows
            max_query_length=64,  # mrc: question tokens kept
            n_best_size=20,  # mrc: start and end candidates searched per window
            max_answer_length=30,  # mrc: longest answer in tokens
            vocab="",  # WordPiece vocab.txt (empty: the init folder's vocab.txt, else Google's)
            lower_case=True,  # lower-case and strip accents, as bert-base-chinese does
        )
    )
    base = defaults.get_base_config()
    config.model = ml_collections.ConfigDict(base.model.to_dict())
    config.model.size = sizes.check_size(size or "base")
    config.optim = ml_collections.ConfigDict(base.optim.to_dict())
    config.optim.update(name="adamw", schedule="linear", peak_lr=2e-5, warmup_steps=0)
    config.optim.warmup_ratio = 0.1  # > 0: warmup_steps = this share of all steps
    config.train = ml_collections.ConfigDict(
        dict(
            seed=0,  # seed of the first run; run i uses seed + i (head init, dropout, order)
            seeds=1,  # repeated runs; results.json reports the max and mean dev metric
            batch_size=32,  # sequences (MRC: windows) per step
            epochs=3,  # passes over the training set
            eval_every_epoch=True,  # evaluate after every epoch and keep the best (else last)
            max_train_examples=0,  # > 0: only the first N training examples (quick runs)
            max_eval_examples=0,  # > 0: only the first N evaluation examples (MRC: questions)
            log_every=50,  # steps between printed loss lines (0: none)
            save_best=True,  # write the best run's best parameters to workdir/best
        )
    )
    return config


def finetune(config: ml_collections.ConfigDict, init: str | None, workdir: str) -> dict:
    """Runs ``config.train.seeds`` fine-tuning runs from ``init`` (a zhlm checkpoint, pretrain
    workdir or HF folder; None: random encoder) and returns what ``results.json`` holds."""
    started = time.time()
    config = config.copy_and_resolve_references()
    os.makedirs(workdir, exist_ok=True)
    pretrained, init_from = _pretrained(config, init)
    tokenizer = tasks.load_tokenizer(config.task, init)
    data = _Data(config, tokenizer)
    model = heads.build_head(config)
    _check_fits(config, tokenizer)
    train = config.train
    num_steps = train.epochs * math.ceil(data.num_train / train.batch_size)
    optim = ml_collections.ConfigDict(config.optim.to_dict())
    if optim.warmup_ratio > 0:
        optim.warmup_steps = min(int(round(optim.warmup_ratio * num_steps)), num_steps - 1)
    seq_len = config.task.max_seq_length
    shapes = jax.eval_shape(lambda: heads.init_params(model, jax.random.key(0), seq_len))
    tx, _ = make_optimizer(optim, num_steps, shapes)  # the tree decides which leaves decay
    steps = _Steps(model, config.task.kind, tx)
    print(
        f"zhlm-finetune: {config.task.name} ({config.task.kind}) from {init_from}: "
        f"{data.num_train} training rows, {num_steps} steps, {train.seeds} seed(s)",
        flush=True,
    )
    runs = []
    for i in range(train.seeds):
        runs.append(_run(train.seed + i, config, data, steps, pretrained))
    with open(os.path.join(workdir, CONFIG), "w", encoding="utf-8") as f:
        f.write(config.to_json(indent=2))
    results = _results(config, init, init_from, data, runs, workdir)
    results["seconds"] = round(time.time() - started, 1)
    tasks.write_json(os.path.join(workdir, RESULTS), results)
    metric = results["metric"]
    print(
        f"zhlm-finetune: {config.task.name} dev {metric} max {results['max']:.2f} "
        f"mean {results['mean']:.2f} over {len(runs)} seed(s); {workdir}/{RESULTS}",
        flush=True,
    )
    return results


def _pretrained(config, init):
    if not init:
        print(
            "zhlm-finetune: warning: no --init, the encoder starts from random weights "
            f"(config.model.size={config.model.size!r})",
            flush=True,
        )
        return None, "random initialisation"
    params, model_section, where = heads.load_pretrained(init, config.train.seed)
    heads.adopt_model(config, model_section)
    return params, where


def _check_fits(config, tokenizer):
    for key in ("epochs", "seeds", "batch_size"):
        if config.train[key] < 1:
            raise ValueError(f"config.train.{key}={config.train[key]} must be at least 1")
    if config.task.max_seq_length > config.model.max_position_embeddings:
        raise ValueError(
            f"task.max_seq_length={config.task.max_seq_length} exceeds the model's "
            f"max_position_embeddings={config.model.max_position_embeddings}"
        )
    if tokenizer.vocab_size > config.model.vocab_size:
        raise ValueError(
            f"the vocab has {tokenizer.vocab_size} tokens, the model only "
            f"{config.model.vocab_size} word embeddings"
        )


class _Data:
    """Both splits read, reported and featurized: ``train``/``eval`` are the device arrays."""

    def __init__(self, config, tokenizer):
        task, limits = config.task, config.train
        train, evaluation, self.reports = tasks.read_task(task)
        if task.kind == "mrc":
            train = [e for e in train if e.located_answers]  # nothing to learn from the others
        train = train[: limits.max_train_examples or None]
        self.examples = evaluation[: limits.max_eval_examples or None]
        if not train or not self.examples:
            raise ValueError(f"{task.name}: no usable training or evaluation examples")
        self.num_train_examples = len(train)
        if task.kind == "mrc":
            args = (tokenizer, task.max_seq_length, task.doc_stride, task.max_query_length)
            self.train = tasks.mrc_features(train, *args).arrays
            self.features = tasks.mrc_features(self.examples, *args)
            self.eval = self.features.arrays
        else:
            args = (tokenizer, task.labels, task.max_seq_length)
            self.train = tasks.classification_features(train, *args)
            self.eval = tasks.classification_features(self.examples, *args)
        self.num_train = len(self.train["input_ids"])


def _batches(arrays: dict, batch_size: int, order: np.ndarray):
    """Batches of rows ``order``, all ``batch_size`` long: the last is filled with copies of
    row 0 whose ``weight`` is 0."""
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        weight = np.zeros(batch_size, np.float32)
        weight[: len(rows)] = 1.0
        rows = np.pad(rows, (0, batch_size - len(rows)))
        yield dict({k: v[rows] for k, v in arrays.items()}, weight=weight)


def classification_loss(outputs, batch):
    return optax.softmax_cross_entropy_with_integer_labels(outputs["logits"], batch["label"])


def span_loss(outputs, batch):
    """Mean of the start and end cross-entropies over the real tokens of each window."""
    real = batch["attention_mask"] > 0

    def cross_entropy(logits, target):
        logits = jnp.where(real, logits, -1e9)
        return optax.softmax_cross_entropy_with_integer_labels(logits, target)

    start = cross_entropy(outputs["start_logits"], batch["start_position"])
    return (start + cross_entropy(outputs["end_logits"], batch["end_position"])) / 2


LOSSES = {"classification": classification_loss, "pair": classification_loss, "mrc": span_loss}


class _Steps:
    """The jitted train step and forward pass of one head model and optimizer."""

    def __init__(self, model, kind, tx):
        loss_fn = LOSSES[kind]

        def apply(params, batch, deterministic, rng=None):
            inputs = (batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            rngs = None if rng is None else {"dropout": rng}
            return model.apply({"params": params}, *inputs, deterministic, rngs=rngs)

        def train_step(state, batch, rng):
            rng = jax.random.fold_in(rng, state["step"])
            count = jnp.sum(batch["weight"])

            def loss(params):
                per_row = loss_fn(apply(params, batch, False, rng), batch)
                return jnp.sum(per_row * batch["weight"]) / jnp.maximum(count, 1.0)

            value, grads = jax.value_and_grad(loss)(state["params"])
            updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
            params = optax.apply_updates(state["params"], updates)
            new_state = dict(step=state["step"] + 1, params=params, opt_state=opt_state)
            return new_state, {"loss_sum": value * count, "count": count}

        self.model, self.tx = model, tx
        self.train_step = jax.jit(train_step, donate_argnums=0)
        self.predict = jax.jit(lambda params, batch: apply(params, batch, True))


def _run(seed, config, data, steps, pretrained) -> dict:
    """One seed: train ``train.epochs`` epochs, evaluating as configured; the best epoch's
    metrics, host parameters and (MRC) predictions."""
    train, kind = config.train, config.task.kind
    init_key, dropout_key = jax.random.split(jax.random.key(seed))
    model_params = heads.init_params(steps.model, init_key, config.task.max_seq_length)
    params, left_fresh = model_params, sorted(model_params)
    if pretrained is not None:
        params, left_fresh = heads.merge(model_params, pretrained, kind)
    # Built under jit so that every leaf is a buffer of its own, which donation needs: eagerly,
    # the Adam moments share one zeros tree, and the parameters would share the pretrained ones.
    state = jax.jit(
        lambda p: dict(
            step=jnp.zeros([], jnp.int32),
            params=jax.tree_util.tree_map(jnp.copy, p),
            opt_state=steps.tx.init(p),
        )
    )(params)
    order_rng = np.random.RandomState(seed)
    best, history = None, []
    for epoch in range(1, train.epochs + 1):
        sums = []
        for batch in _batches(data.train, train.batch_size, order_rng.permutation(data.num_train)):
            state, metrics = steps.train_step(state, batch, dropout_key)
            sums.append(metrics)
            if train.log_every and len(sums) % train.log_every == 0:
                print(f"  seed {seed} epoch {epoch} step {len(sums)}: loss {_mean(sums):.4f}")
        record = {"epoch": epoch, "train_loss": _mean(sums)}
        if train.eval_every_epoch or epoch == train.epochs:
            scores, predictions = _evaluate(state["params"], config, data, steps)
            record.update(scores)
            if best is None or scores[PRIMARY[kind]] > best["scores"][PRIMARY[kind]]:
                params_host = jax.device_get(state["params"])
                best = dict(scores=scores, epoch=epoch, params=params_host, preds=predictions)
        history.append(record)
        shown = ", ".join(f"{k} {v:.4f}" for k, v in record.items() if k != "epoch")
        print(f"zhlm-finetune: seed {seed} epoch {epoch}/{train.epochs}: {shown}", flush=True)
    return dict(seed=seed, history=history, fresh=left_fresh, **best)


def _mean(sums) -> float:
    fetched = jax.device_get(sums)
    count = sum(float(m["count"]) for m in fetched)
    return sum(float(m["loss_sum"]) for m in fetched) / max(count, 1.0)


def _evaluate(params, config, data, steps) -> tuple[dict, dict | None]:
    """Dev metrics (percent) and, for MRC, the ``{qid: answer}`` predictions."""
    task = config.task
    outputs = []
    rows = np.arange(len(data.eval["input_ids"]))
    for batch in _batches(data.eval, config.train.batch_size, rows):
        out = jax.device_get(steps.predict(params, batch))
        outputs.append({k: v[batch["weight"] > 0] for k, v in out.items()})
    merged = {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}
    if task.kind != "mrc":
        return {"accuracy": 100 * tasks.accuracy(merged["logits"], data.eval["label"])}, None
    predictions = tasks.predict_answers(
        data.features,
        data.examples,
        merged["start_logits"],
        merged["end_logits"],
        task.n_best_size,
        task.max_answer_length,
    )
    score = tasks.mrc_score(data.examples, predictions)
    return {"f1": score.f1, "em": score.em, "average": score.average}, predictions


def _results(config, init, init_from, data, runs, workdir) -> dict:
    """results.json: per-seed metrics, max and mean, what the readers skipped; writes the best
    run's parameters and predictions."""
    metric = PRIMARY[config.task.kind]
    values = [run["scores"][metric] for run in runs]
    top = runs[int(np.argmax(values))]
    results = dict(
        task=config.task.name,
        kind=config.task.kind,
        metric=metric,
        init=init or None,
        init_from=init_from,
        train_examples=data.num_train_examples,
        train_rows=data.num_train,
        eval_examples=len(data.examples),
        seeds=[
            dict(seed=r["seed"], best_epoch=r["epoch"], **r["scores"], epochs=r["history"])
            for r in runs
        ],
        max=max(values),
        mean=float(np.mean(values)),
        skipped={r.path: r.dropped for r in data.reports},
        read_issues={r.path: dict(r.counts) for r in data.reports},
        fresh_parameters=top["fresh"],
    )
    if config.task.kind != "mrc":
        counts = np.bincount(data.eval["label"], minlength=len(config.task.labels))
        results["majority_rate"] = 100 * float(counts.max() / counts.sum())
    else:
        results["predictions"] = os.path.join(workdir, PREDICTIONS)
        results["eval_set"] = os.path.join(workdir, EVAL_SET)
        tasks.write_json(results["predictions"], top["preds"])
        tasks.write_json(results["eval_set"], tasks.squad_json(data.examples))
    if config.train.save_best:
        results["best"] = save_finetuned(os.path.join(workdir, BEST), top["params"], config)
    return results


def save_finetuned(path: str, params, config) -> str:
    """``path/params`` (orbax) and ``path/finetune_config.json``; returns ``path``."""
    path = os.path.abspath(path)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, CONFIG), "w", encoding="utf-8") as f:
        f.write(config.to_json(indent=2))
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(path, "params"), params, force=True)
    checkpointer.wait_until_finished()
    return path


def load_finetuned(path: str):
    """``(model, params, config)`` of a folder :func:`save_finetuned` wrote."""
    with open(os.path.join(path, CONFIG), encoding="utf-8") as f:
        values = json.load(f)
    config = get_base_config()
    for section, keys in values.items():
        for key, value in keys.items():
            config[section][key] = tuple(value) if isinstance(value, list) else value
    params = ocp.StandardCheckpointer().restore(os.path.join(os.path.abspath(path), "params"))
    return heads.build_head(config), jax.tree_util.tree_map(jnp.asarray, params), config
