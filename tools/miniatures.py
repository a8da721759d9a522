"""Miniature ablations: pretrain small models that differ in one setting, fine-tune each, compare.

Used by ``reproduce_tables.py`` for ``macbert_replacement``, ``roberta_inputs`` and
``albert_sharing``. A *scale* fixes the model size, corpus, steps and fine-tuning budget:

- ``micro`` proves the pipeline end to end in CI within minutes (a handful of steps; it is not
  expected to reproduce any ordering);
- ``mini`` is the CPU-hours version to run in the background (mini model, both shared corpora,
  thousands of steps, full ChnSentiCorp and the CMRC split, three seeds);
- ``paper`` runs nothing and prints the commands at the papers' scale for a TPU pod.

Every run is a real ``zhlm.train.loop.train_and_evaluate`` followed by
``zhlm.finetune.train.finetune`` from its workdir, so the tables measure exactly what a user
gets from ``zhlm-pretrain`` and ``zhlm-finetune``.
"""

import dataclasses
import os
import shlex
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared", "data")


@dataclasses.dataclass(frozen=True)
class Scale:
    size: str  # model size for pretraining
    seq: int  # pretraining sequence length
    batch: int
    steps: int
    corpora: tuple  # inputs for config.data.input (empty: the bundled sample)
    finetune_examples: int  # training examples per task (0: all)
    finetune_epochs: int
    seeds: int


SCALES = {
    "micro": Scale("tiny", 64, 8, 12, (), 64, 1, 1),
    "mini": Scale(
        "mini",
        128,
        64,
        4000,
        (
            os.path.join(SHARED, "corpus", "clue_small_docs.txt"),
            os.path.join(ROOT, "zhlm", "resources", "peoples_daily_199801_sample.txt"),
        ),
        0,
        2,
        3,
    ),
}

# The papers' scale, printed by --scale paper (BERT-base dimensions, each paper's batch/steps).
PAPER_PRETRAIN = "--config.train.batch_size={batch} --config.train.num_steps={steps}"


def set_values(config, values: dict):
    """``{"section.key": value}`` onto a locked config (tuples for lists)."""
    for key, value in values.items():
        section, name = key.split(".")
        config[section][name] = tuple(value) if isinstance(value, list) else value
    return config


def pretrain(load_config, recipe, scale: Scale, values: dict, workdir: str) -> dict:
    """Pretrains ``recipe`` at ``scale`` with ``values`` changed; the last held-out metrics."""
    from zhlm.train import metrics
    from zhlm.train.loop import train_and_evaluate

    config = load_config(recipe, scale.size)
    set_values(
        config,
        {
            "data.input": list(scale.corpora),
            "data.max_seq_length": scale.seq,
            "train.batch_size": scale.batch,
            "train.num_steps": scale.steps,
            "train.log_every": max(scale.steps // 10, 1),
            "train.eval_every": scale.steps,
            "train.eval_examples": 4 * scale.batch,
            "train.checkpoint_every": scale.steps,
            "optim.warmup_steps": max(scale.steps // 10, 1),
        },
    )
    set_values(config, values)
    train_and_evaluate(config, workdir)
    return metrics.read(workdir, "eval")[-1]


def finetune(task: str, scale: Scale, init: str, workdir: str) -> dict:
    """Fine-tunes ``task`` (a configs/finetune file) from a pretraining workdir; its results."""
    raise NotImplementedError


def run_variants(load_config, name, variants, tasks, scale_name, root):
    """Pretrains and fine-tunes every variant; returns rows of measured figures and seconds."""
    scale = SCALES[scale_name]
    rows = []
    for label, recipe, values in variants:
        start = time.time()
        workdir = os.path.join(root, name, label)
        evaluation = pretrain(load_config, recipe, scale, values, workdir)
        results = {
            task: finetune(task, scale, workdir, os.path.join(workdir, f"finetune_{task}"))
            for task in tasks
        }
        rows.append((label, evaluation, results, time.time() - start))
    return rows


def mean_std(values) -> str:
    values = np.asarray(values, float)
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{values.mean():.1f} ± {values.std(ddof=1):.1f}"


def paper_commands(variants, recipe_size="base", batch=256, steps=1_000_000) -> list[str]:
    """The zhlm-pretrain command of every variant at the papers' scale (BERT-base)."""
    lines = []
    for label, recipe, values in variants:
        flags = " ".join(f"--config.{k}={shlex.quote(str(v))}" for k, v in values.items())
        lines.append(
            f"# {label}\nzhlm-pretrain --config=configs/{recipe}.py:{recipe_size} "
            f"--workdir=gs://BUCKET/{label} --config.data.data_dir=gs://BUCKET/data "
            + PAPER_PRETRAIN.format(batch=batch, steps=steps)
            + (f" {flags}" if flags else "")
        )
    return lines
