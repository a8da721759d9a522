"""Runs the miniature ablations of ``tools/ablation_tables.py`` (``reproduce_tables.py``'s
``macbert_replacement``, ``roberta_inputs``, ``albert_sharing``, ``ernie_knowledge``,
``spanbert_masking`` and ``bert_wwm``): pretrain one model per variant, fine-tune it on the
downstream tasks over several seeds, and tabulate mean ± std beside the paper.

Each variant is the recipe's own config (``configs/<recipe>.py``) with the few keys the ablation
changes, so a table compares exactly what the paper compares and nothing else. A scale fixes
how big everything is:

* ``micro``: two pretraining steps of 8 per variant, then one fine-tuning step of 16 examples
  on one of the table's tasks (``Ablation.micro_tasks``), one seed; it proves the whole path
  (prepare → pretrain → checkpoint → fine-tune → metric → table) of every variant in CI and says
  nothing about orderings. Compiling each variant's steps is most of what it costs.
* ``mini``: the tiny model (L2/H128) pretrained for 600 steps of 32 × 128 on the bundled People's
  Daily sample plus ``corpus/clue_small_docs.txt``, then fine-tuned on subsets of the tasks with
  3 seeds; CPU minutes per variant. At this size the downstream differences are mostly noise,
  and the tables say so when the paper's ordering does not come out.
* ``paper``: trains nothing; prints the commands and overrides for a TPU run at the papers'
  scale (``run`` returns them instead of results).

Runs are cached in the workdir: a finished pretraining (its final checkpoint) and a finished
fine-tuning (its ``results.json``) are reused, so an interrupted ``mini`` run continues where it
stopped. One pretraining per variant; the seeds vary the fine-tuning (head init, dropout, order).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import time

import numpy as np
from ablation_tables import ABLATIONS, DIALOGUE, Ablation, Variant

from zhlm import config_files, defaults

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")


@dataclasses.dataclass(frozen=True)
class Scale:
    size: str  # model size of every variant
    pretrain: dict  # config.train overrides for pretraining
    corpora: tuple  # extra pretraining inputs (name, path) beside the bundled sample
    finetune: dict  # config.train overrides for fine-tuning
    lr: float  # fine-tuning peak learning rate (small models need more than base's 2e-5)
    tasks: dict  # task -> config.task overrides


# One length a task (no buckets): each bucket would be one more train and eval program to compile.
MICRO_TASK = dict(max_seq_length=128, length_buckets=(128,))
SCALES = {
    "micro": Scale(
        size="tiny",
        # No held-out evaluation (eval_every=0): its step would be one more compile per variant.
        pretrain=dict(
            batch_size=8,
            num_steps=2,
            log_every=1,
            eval_every=0,
            eval_examples=8,
            checkpoint_every=2,
        ),
        corpora=(),
        finetune=dict(
            batch_size=16,
            epochs=1,
            seeds=1,
            max_train_examples=16,
            max_eval_examples=16,
            log_every=0,
            save_best=False,
        ),
        lr=1e-4,
        tasks={
            "chnsenticorp": MICRO_TASK,
            "ocnli": MICRO_TASK,
            "cmrc2018": dict(MICRO_TASK, doc_stride=64, max_query_length=32),
            "msra_ner": MICRO_TASK,  # no MSRA sentence is over 100 characters
        },
    ),
    "mini": Scale(
        size="tiny",
        pretrain=dict(eval_every=300, eval_examples=256),  # the recipe's local 600 x 32 steps
        corpora=(("clue", os.path.join(DATA, "corpus", "clue_small_docs.txt")),),
        finetune=dict(
            batch_size=32,
            epochs=2,
            seeds=3,
            max_train_examples=2000,
            max_eval_examples=1000,
            log_every=0,
            save_best=False,
        ),
        lr=1e-4,
        tasks={
            "chnsenticorp": dict(max_seq_length=128),
            "ocnli": dict(max_seq_length=128),
            "cmrc2018": dict(max_seq_length=256, doc_stride=128, max_query_length=32),
            "msra_ner": dict(max_seq_length=128),
        },
    ),
}
# Per-task changes to a mini scale's fine-tuning. cmrc2018 counts questions; its subsets are
# smaller (each question makes several windows). msra_ner sentences are short and a tiny tagger
# needs many steps before it tells entities from O (configs/finetune/msra_ner.py): more of them.
MINI_TRAIN = {
    "cmrc2018": dict(max_train_examples=800, max_eval_examples=300),
    "msra_ner": dict(max_train_examples=8000, epochs=3),
}
# ... and to its learning rate: the tagger needs more than the classifiers' 1e-4. Measured from
# one ERNIE tiny pretrained 600 steps at this scale, one seed: dev entity F1 5.5 at 1e-4, 15.8 at
# 1e-3.
MINI_LR = {"msra_ner": 1e-3}


def scale_tasks(ablation: Ablation, scale_name: str) -> tuple:
    """The tasks ``ablation`` fine-tunes at ``scale_name``."""
    return (ablation.micro_tasks or ablation.tasks) if scale_name == "micro" else ablation.tasks


def pretrain_config(variant: Variant, scale: Scale | None):
    """The variant's config at ``scale`` (None: the recipe at base size, as in the papers)."""
    config = config_files.load(variant.recipe, scale.size if scale else "base")
    config.update_from_flattened_dict(dict(variant.overrides))
    if scale is None:
        return config
    if variant.recipe == "albert" and scale.size == "tiny" and config.model.embed_dim:
        config.model.embed_dim = 32  # see the albert_sharing note
    config.train.update(scale.pretrain)
    config.optim.warmup_steps = defaults.local_warmup(config.train.num_steps)
    if scale.corpora or config.data.dialogue_sources:
        from zhlm.data import annotate, cache

        bundled = os.path.abspath(annotate.resource(cache.BUNDLED_CORPUS))
        texts = (("peoples_daily", bundled), *scale.corpora)
        config.data.input = tuple(f"{name}={path}" for name, path in texts)
        if config.data.dialogue_sources:
            _dialogue_data(config, texts)
    return config


DIALOGUE_SAMPLE = "dialogue_sample.jsonl"  # in zhlm/resources, as configs/ernie.py:dlm reads


def _dialogue_data(config, texts) -> None:
    """configs/ernie.py:dlm's data part at a scale's sources: the bundled dialogue sample added
    as a dialogue source, which keeps its mixture weight (15.7%), and the text sources share the
    rest by size (file bytes, what an empty mixture would give them by examples)."""
    from zhlm.data import annotate

    weights = dict(item.split(":") for item in config.data.mixture.split(","))
    dialogue = float(weights[DIALOGUE])
    sizes = {name: os.path.getsize(path) for name, path in texts}
    total = sum(sizes.values())
    mixture = [f"{name}:{(100 - dialogue) * size / total:.1f}" for name, size in sizes.items()]
    config.data.mixture = ",".join([*mixture, f"{DIALOGUE}:{dialogue:g}"])
    sample = os.path.abspath(annotate.resource(DIALOGUE_SAMPLE))
    config.data.input = (*config.data.input, f"{DIALOGUE}={sample}")


# The task configs name no data: the shared files each task reads here (relative to DATA; an
# empty dev file means the config's holdout split of the training file).
TASK_FILES = {
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "ocnli": ("ocnli/train.10k.json", "ocnli/dev.json"),
    "cmrc2018": ("cmrc2018/cmrc2018_dev.json", ""),
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),  # msra_ner/SOURCE.md
}


def task_files(task: str, root: str = DATA) -> dict:
    """``train_file`` and ``dev_file`` of ``task`` under ``root``."""
    train, dev = TASK_FILES[task]
    return dict(
        train_file=os.path.join(root, train), dev_file=os.path.join(root, dev) if dev else ""
    )


def finetune_config(task: str, scale_name: str):
    scale = SCALES[scale_name]
    config = config_files.load(f"finetune/{task}", scale.size)
    config.task.update(task_files(task), **scale.tasks[task])
    config.train.update(scale.finetune)
    if scale_name == "mini":
        config.train.update(MINI_TRAIN.get(task, {}))
    config.optim.peak_lr = MINI_LR.get(task, scale.lr) if scale_name == "mini" else scale.lr
    return config


def run_variant(variant: Variant, ablation: Ablation, scale_name: str, workdir: str) -> dict:
    """Pretrains (or reuses) one variant and fine-tunes it on every task; returns
    ``{"pretrain": held-out metrics, "minutes": ..., task: results.json}``."""
    from zhlm import run_files
    from zhlm.finetune.train import finetune
    from zhlm.train import metrics
    from zhlm.train.loop import train_and_evaluate

    scale = SCALES[scale_name]
    folder = os.path.join(workdir, variant_folder(variant))
    pre = os.path.join(folder, "pretrain")
    config = pretrain_config(variant, scale)
    timing = _Timing(folder)
    tasks = scale_tasks(ablation, scale_name)
    done = {t: os.path.join(folder, t, run_files.RESULTS) for t in tasks}
    steps = run_files.checkpoint_steps(pre)
    finished = bool(steps) and steps[-1] >= config.train.num_steps
    # Only a fine-tuning still to run needs the checkpoint: a variant whose results are all
    # kept (tools/results keeps no checkpoints) is read back, not pretrained again.
    if not finished and not all(map(os.path.isfile, done.values())):
        with timing("pretrain"):
            train_and_evaluate(config, pre)
    evals = metrics.read(pre, "eval")
    out = {"pretrain": evals[-1] if evals else {}, "params": param_count(config)}
    for task in tasks:
        if os.path.isfile(done[task]):
            with open(done[task], encoding="utf-8") as f:
                out[task] = json.load(f)
        else:
            with timing(task):
                ft_config = finetune_config(task, scale_name)
                out[task] = finetune(ft_config, pre, os.path.join(folder, task))
    out["minutes"] = timing.total()
    return out


def _compilation_cache(workdir: str) -> None:
    """XLA's persistent cache under the workdir, unless ``JAX_COMPILATION_CACHE_DIR`` names
    one already (the tests' session cache, shared by their processes): the variants'
    fine-tuning steps (and the pretraining steps of variants that differ only in data) are
    the same programs, compiled once across variants, tables and reruns."""
    import jax

    if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, "xla-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def variant_folder(variant: Variant) -> str:
    return "".join(c if c.isalnum() or c in "_+-" else "_" for c in variant.name)


class _Timing:
    """Minutes per stage in ``folder/minutes.json``, so that a resumed table still reports
    what each cached stage took when it ran."""

    def __init__(self, folder: str):
        self.path = os.path.join(folder, "minutes.json")
        self.minutes = {}
        if os.path.isfile(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.minutes = json.load(f)

    @contextlib.contextmanager
    def __call__(self, stage: str):
        started = time.time()
        yield
        self.minutes[stage] = (time.time() - started) / 60
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(self.minutes, f, indent=1)

    def total(self) -> float:
        return sum(self.minutes.values())


def param_count(config) -> int:
    from zhlm.models import build_model, count_params

    return int(sum(count_params(build_model(config)).values()))


def _cell(results: dict) -> str:
    values = [s[results["metric"]] for s in results["seeds"]]
    return f"{np.mean(values):.1f} ± {np.std(values):.1f} (max {np.max(values):.1f})"


TASK_TITLES = {
    "cmrc2018": "CMRC 2018 F1",
    "ocnli": "OCNLI acc",
    "chnsenticorp": "ChnSentiCorp acc",
    "msra_ner": "MSRA NER F1",  # entity F1, conlleval (results.json metric "f1")
}


def table(name: str, scale_name: str, workdir: str) -> str:
    """Runs the ablation ``name`` at ``scale_name`` (micro or mini) and returns Markdown."""
    ablation = ABLATIONS[name]
    _compilation_cache(workdir)
    workdir = os.path.join(workdir, name)
    rows = {v.name: run_variant(v, ablation, scale_name, workdir) for v in ablation.variants}
    scale = SCALES[scale_name]
    tasks = scale_tasks(ablation, scale_name)
    first = rows[ablation.variants[0].name]
    seeds = len(first[tasks[0]]["seeds"])
    lines = [
        f"### {ablation.title}, {scale_name} scale",
        "",
        f"{scale.size} model; pretraining {_pretrain_words(ablation, scale)}; fine-tuning "
        f"{seeds} seed{'s' if seeds > 1 else ''}, mean ± std over seeds (and the max) on the "
        "held-out split of each task.",
        "",
        "| variant | paper | parameters | held-out MLM acc | "
        + " | ".join(TASK_TITLES[t] for t in tasks)
        + " | minutes |",
        "|---" * (5 + len(tasks)) + "|",
    ]
    for variant in ablation.variants:
        r = rows[variant.name]
        mlm = r["pretrain"].get("mlm_accuracy")
        lines.append(
            f"| {variant.name} | {variant.paper or '-'} | {r['params'] / 1e6:.2f}M | "
            + (f"{100 * mlm:.1f}%" if mlm is not None else "-")
            + " | "
            + " | ".join(_cell(r[t]) for t in tasks)
            + f" | {r['minutes']:.1f} |"
        )
    lines += [
        "",
        ablation.note,
        "Held-out MLM accuracy is measured under each variant's own masking and input format "
        "(MacBERT's similar words keep a hint of the original), so it does not rank the rows.",
    ]
    for task in tasks:
        majority = first[task].get("majority_rate")
        if majority is not None:
            lines.append(f"{TASK_TITLES[task]}: the majority class is {majority:.1f}%.")
    if ablation.paper_order:
        lines.append(_ordering(ablation, rows, tasks))
    if scale_name == "micro":
        lines.append("Micro scale checks the pipeline only; its numbers carry no ordering.")
    return "\n".join(lines)


def _pretrain_words(ablation: Ablation, scale: Scale) -> str:
    config = pretrain_config(ablation.variants[0], scale)
    corpora = " + ".join(["the bundled People's Daily sample", *(n for n, _ in scale.corpora)])
    return (
        f"{config.train.num_steps} steps of {config.train.batch_size} x "
        f"{config.data.max_seq_length} on {corpora}"
    )


def _ordering(ablation: Ablation, rows: dict, tasks: tuple) -> str:
    nested = ablation.paper_order and isinstance(ablation.paper_order[0], tuple)
    chains = ablation.paper_order if nested else (ablation.paper_order,)
    return " ".join(_chain_ordering(chain, rows, tasks) for chain in chains)


def _chain_ordering(chain: tuple, rows: dict, tasks: tuple) -> str:
    parts = []
    for task in tasks:
        means = {
            v: np.mean([s[rows[v][task]["metric"]] for s in rows[v][task]["seeds"]]) for v in chain
        }
        ours = sorted(chain, key=lambda v: -means[v])
        ranked = [
            f" {'=' if np.isclose(means[a], means[b]) else '>'} {b}"
            for a, b in zip(ours, ours[1:], strict=False)
        ]
        strict = [means[a] > means[b] for a, b in itertools.pairwise(chain)]
        verdict = "reproduces" if all(strict) else "does not reproduce"
        parts.append(f"{TASK_TITLES[task]}: ours {ours[0]}{''.join(ranked)} ({verdict} it)")
    order = " > ".join(chain)
    return f"The paper's ordering is {order}. Ordering by mean: " + "; ".join(parts) + "."
