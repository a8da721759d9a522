"""The miniature ablations behind ``reproduce_tables.py``'s ``macbert_replacement``,
``roberta_inputs``, ``albert_sharing``, ``ernie_knowledge``, ``spanbert_masking`` and ``bert_wwm``
tables: pretrain one model per variant, fine-tune it on the downstream tasks over several seeds,
and tabulate mean ± std beside the paper.

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

from zhlm import config_files, defaults

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str  # row label and folder name
    recipe: str  # configs/<recipe>.py
    overrides: tuple  # (dotted config key, value) pairs applied to the recipe's config
    paper: str = ""  # what the paper reports for this row


@dataclasses.dataclass(frozen=True)
class Scale:
    size: str  # model size of every variant
    pretrain: dict  # config.train overrides for pretraining
    corpora: tuple  # extra pretraining inputs (name, path) beside the bundled sample
    finetune: dict  # config.train overrides for fine-tuning
    lr: float  # fine-tuning peak learning rate (small models need more than base's 2e-5)
    tasks: dict  # task -> config.task overrides


MICRO_TASK = dict(max_seq_length=128)
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
            "cmrc2018": dict(max_seq_length=128, doc_stride=64, max_query_length=32),
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


@dataclasses.dataclass(frozen=True)
class Ablation:
    title: str
    variants: tuple
    tasks: tuple  # fine-tuning tasks, the first one decides the ordering check
    # Variant names best first, where the paper states an ordering; several such chains (a tuple
    # of tuples) where the table holds several comparisons.
    paper_order: tuple = ()
    note: str = ""
    paper_runs: dict = dataclasses.field(default_factory=dict)  # paper-scale train overrides
    micro_tasks: tuple = ()  # the tasks micro scale fine-tunes (CI time); empty: all of tasks


def scale_tasks(ablation: Ablation, scale_name: str) -> tuple:
    """The tasks ``ablation`` fine-tunes at ``scale_name``."""
    return (ablation.micro_tasks or ablation.tasks) if scale_name == "micro" else ablation.tasks


REPLACEMENTS = ("mac", "random", "partial_mask", "all_mask")
ERNIE_LEVELS = (1 / 3, 1 / 3, 1 / 3)  # P(basic, phrase, entity): configs/ernie.py's default
DIALOGUE = "dialogue"  # the --input name of the dialogue source in DLM variants
# SpanBERT Table 6's rows: segment pairs with NSP and no SBO, ERNIE's unit ids in the data.
SPANBERT_2SEQ = (
    ("data.format", "segment_pair"),
    ("model.sentence_head", "nsp"),
    ("model.span_boundary_head", False),
    ("data.fields", ("phrase_ids", "entity_ids")),
)
# SpanBERT's dev figures (Joshi et al. 2020, latest arXiv version 1907.10529, Table 6: masking
# schemes, all 2seq + NSP, checkpoints at 1.2M steps): SQuAD 2.0 F1, OntoNotes coreference F1,
# GLUE average.
SPANBERT_T6 = {
    "subword": "SQuAD 2.0 83.8, coref 77.7, GLUE 83.2 (BERT's masking)",
    "words": "SQuAD 2.0 84.3, coref 76.6, GLUE 82.9",
    "entities": "SQuAD 2.0 84.8, coref 75.6, GLUE 83.2",
    "phrases": "SQuAD 2.0 85.0, coref 76.7, GLUE 83.5",
    "spans": "SQuAD 2.0 85.4, coref 76.4, GLUE 83.4",
}
ABLATIONS = {
    "macbert_replacement": Ablation(
        title="MacBERT: the MLM replacement policy (Cui et al., 2020)",
        variants=tuple(
            Variant(
                p,
                "macbert",
                # MacBERT's selection (whole-word n-grams) everywhere; 'correction' is that
                # selection with similar-word replacement, 'ngram' the same with the others.
                (("masking.scheme", "correction" if p == "mac" else "ngram"),)
                + (("masking.replacement", p),),
                paper=f"rank {i + 1}",
            )
            for i, p in enumerate(REPLACEMENTS)
        ),
        tasks=("cmrc2018", "chnsenticorp"),
        paper_order=REPLACEMENTS,
        note=(
            "The paper plots the four policies (80% similar word / 90% random / 80% [MASK] "
            "with 10% random / 90% [MASK], 10% kept in each) on CMRC 2018 and DRCD over "
            "pretraining steps and finds mac > random > partial_mask > all_mask; the rank "
            "column is that ordering (a figure: no numbers to quote). The journal version's "
            "table of MacBERT-large ablations (arXiv 1906.08101, IEEE TASLP 2021) puts the test "
            "average at 87.18 with Mac and 86.88 without it (w/o Mac)."
        ),
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("cmrc2018",),
    ),
    "roberta_inputs": Ablation(
        title="RoBERTa Table 2: input format and NSP (Liu et al., 2019)",
        variants=(
            Variant(
                "segment_pair+nsp",
                "roberta_wwm",
                (("data.format", "segment_pair"), ("model.sentence_head", "nsp")),
                paper="SQuAD 1.1 90.4, MNLI-m 84.0, SST-2 92.9",
            ),
            Variant(
                "full_sentences",
                "roberta_wwm",
                (("data.format", "full_sentences"),),
                paper="SQuAD 1.1 90.4, MNLI-m 84.7, SST-2 92.5",
            ),
            Variant(
                "doc_sentences",
                "roberta_wwm",
                (("data.format", "doc_sentences"),),
                paper="SQuAD 1.1 90.6, MNLI-m 84.7, SST-2 92.7",
            ),
        ),
        tasks=("cmrc2018", "ocnli", "chnsenticorp"),
        note=(
            "CMRC 2018, OCNLI and ChnSentiCorp stand in for SQuAD, MNLI and SST-2. Every row "
            "uses whole-word masking (roberta_wwm); only the input format and the sentence "
            "head change."
        ),
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("chnsenticorp",),
    ),
    "albert_sharing": Ablation(
        title="ALBERT Tables 3/4: cross-layer sharing and the embedding width (Lan et al., 2020)",
        variants=(
            Variant(
                "not-shared, E=H",
                "albert",
                (("model.share_layers", "none"), ("model.embed_dim", 0)),
                paper="E=768: 108M, avg 82.3 (Table 4)",
            ),
            Variant(
                "not-shared, factorised E",
                "albert",
                (("model.share_layers", "none"),),
                paper="E=128: 89M, avg 81.7 (Table 3)",
            ),
            Variant(
                "all-shared, E=H",
                "albert",
                (("model.share_layers", "all"), ("model.embed_dim", 0)),
                paper="E=768: 31M, avg 79.8 (Table 4)",
            ),
            Variant(
                "all-shared, factorised E",
                "albert",
                (("model.share_layers", "all"),),
                paper="E=128: 12M, avg 80.1 (Table 3)",
            ),
        ),
        tasks=("cmrc2018", "ocnli", "chnsenticorp"),
        note=(
            "Factorised E is the recipe's E=128 at base size (H=768); in miniature (H=128) it "
            "is E=32. CMRC 2018, OCNLI and ChnSentiCorp stand in for SQuAD, MNLI and SST-2."
        ),
        paper_runs=dict(num_steps=125_000, batch_size=4096),
        micro_tasks=("chnsenticorp",),
    ),
    "ernie_knowledge": Ablation(
        title="ERNIE 1.0: knowledge masking and the DLM (Sun et al., 2019)",
        variants=(
            Variant(
                "basic",
                "ernie",
                (("masking.scheme", "token"),),
                paper="XNLI, 10% of the data: basic-level (characters); figure not verified",
            ),
            Variant(
                "+phrase",
                "ernie",
                (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0.5, 0.5, 0.0))),
                paper="basic + phrase-level: above basic; figure not verified",
            ),
            Variant(
                "+entity",
                "ernie",
                (("masking.scheme", "knowledge"), ("masking.knowledge_probs", ERNIE_LEVELS)),
                paper="basic + phrase + entity: the best of the three; figure not verified",
            ),
            Variant(
                "+entity +DLM",
                "ernie",
                (
                    ("masking.scheme", "knowledge"),
                    ("masking.knowledge_probs", ERNIE_LEVELS),
                    ("data.dialogue_sources", (DIALOGUE,)),
                    ("data.mixture", f"text:84.3,{DIALOGUE}:15.7"),
                ),
                paper="+ forum dialogue (15.7%) with DLM: XNLI +0.7 dev / +1.0 test accuracy "
                "(the paper's prose as two secondary notes quote it; its table not verified)",
            ),
        ),
        tasks=("ocnli", "msra_ner"),
        paper_order=(("+entity", "+phrase", "basic"), ("+entity +DLM", "+entity")),
        note=(
            "OCNLI and MSRA NER stand in for XNLI (the paper's ablations are on XNLI only, dev and "
            "test accuracy). The paper adds its levels as training stages (basic, then phrase, "
            "then entity); here every sequence draws its level (masking.knowledge_probs: basic, "
            "phrase, entity) and a level's phrases or entities are masked before its plain words; "
            "'basic' is character masking (scheme token), '+phrase' draws basic or phrase, "
            "'+entity' all three (the recipe). '+entity +DLM' is configs/ernie.py:dlm's data at "
            "this scale: the bundled dialogue sample mixed in at 15.7% as DLM instances (role "
            "ids in the token types, real/fake in the NSP head), as the paper's DLM table mixes "
            "forum dialogue into encyclopedia and news text; every other row reads the text only. "
            "Phrases and entities are THUOCL lexicon matches, not the paper's tools. The paper's "
            "figures (arXiv 1904.09223, its XNLI tables) are not verified here: no stored copy "
            "of its full text could be read, and the notes that discuss it show the tables as "
            "images. The rows give the comparison and the ordering it reports; the DLM row's "
            "gain is the paper's sentence as quoted in secondary notes, which also give its DLM "
            "corpora as 10% samples of Baike 71.2%, news 13% and forum dialogue 15.7%, each "
            "figure the mean of 5 fine-tuning runs."
        ),
        # ERNIE 1.0 gives no step count that could be checked here: BERT's schedule.
        paper_runs=dict(num_steps=1_000_000, batch_size=256),
        micro_tasks=("ocnli",),
    ),
    "spanbert_masking": Ablation(
        title="SpanBERT Tables 6 and 7: masking schemes and auxiliary objectives "
        "(Joshi et al., 2020)",
        variants=(
            *(
                Variant(name, "spanbert", SPANBERT_2SEQ + overrides, paper=f"Table 6: {paper}")
                for name, overrides, paper in (
                    ("subword tokens", (("masking.scheme", "token"),), SPANBERT_T6["subword"]),
                    ("whole words", (("masking.scheme", "whole_word"),), SPANBERT_T6["words"]),
                    (
                        "named entities",
                        (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0, 0, 1))),
                        SPANBERT_T6["entities"],
                    ),
                    (
                        "noun phrases",
                        (("masking.scheme", "knowledge"), ("masking.knowledge_probs", (0, 1, 0))),
                        SPANBERT_T6["phrases"],
                    ),
                    (
                        "geometric spans",
                        (("masking.scheme", "span"),),
                        SPANBERT_T6["spans"] + "; = Table 7's span (2seq) + NSP",
                    ),
                )
            ),
            Variant(
                "span, no auxiliary",
                "spanbert",
                (("model.span_boundary_head", False),),
                paper="Table 7, span (1seq): SQuAD 2.0 86.7, coref 76.3, GLUE 83.8",
            ),
            Variant(
                "span + SBO",
                "spanbert",
                (),
                paper="Table 7, span (1seq) + SBO: SQuAD 2.0 86.8, coref 79.0, GLUE 84.0",
            ),
        ),
        tasks=("cmrc2018", "msra_ner"),
        paper_order=(
            ("geometric spans", "noun phrases", "named entities", "whole words", "subword tokens"),
            ("span + SBO", "span, no auxiliary", "geometric spans"),
        ),
        note=(
            "CMRC 2018 stands in for SQuAD 2.0 and the paper's other QA sets, MSRA NER for its "
            "span tasks (coreference, TACRED). The five masking rows are bi-sequence training with "
            "NSP and no SBO (data.format segment_pair, model.sentence_head nsp, "
            "model.span_boundary_head False), so 'geometric spans' is also Table 7's span (2seq) + "
            "NSP row; they read one dataset carrying ERNIE's phrase and entity ids (data.fields). "
            "Named entities and noun phrases are the knowledge scheme at its entity or phrase "
            "level alone (THUOCL entities and multi-word phrases, not the paper's spaCy entities "
            "and noun phrases): those units first, whole words fill the rest of the 15% (the "
            "paper: half the budget from entities or phrases, half random whole words). The two "
            "other rows "
            "are single segments (doc_sentences) without NSP, with and without the span boundary "
            "objective. The paper's orderings are on SQuAD 2.0: Table 6's masking schemes (its "
            "caption: all bi-sequence with NSP) and Table 7's objectives (SBO > no NSP > NSP). "
            "Figures: dev sets, the 1.2M-step checkpoints, from the latest arXiv version "
            "(1907.10529), where these are Tables 6 and 7."
        ),
        # Its ablations compare the 1.2M-step checkpoints of 2.4M-step runs (Sec. 4.2, Table 6).
        paper_runs=dict(num_steps=1_200_000, batch_size=256),
        micro_tasks=("msra_ner",),
    ),
    "bert_wwm": Ablation(
        title="Chinese-BERT-wwm and MacBERT: character, whole-word and n-gram masking "
        "(Cui et al., 2019/2021; 2020)",
        variants=(
            Variant(
                "character",
                "bert",
                (("masking.scheme", "token"),),
                paper="BERT: CMRC dev F1 84.5 (84.0), ChnSentiCorp dev 94.7 (94.3), "
                "MSRA NER 95.3 (94.9)",
            ),
            Variant(
                "whole word",
                "bert",
                (("masking.scheme", "whole_word"),),
                paper="BERT-wwm: CMRC dev F1 85.6 (84.7), ChnSentiCorp dev 95.1 (94.5), "
                "MSRA NER 95.4 (95.1)",
            ),
            Variant(
                "n-gram",
                "bert",
                (("masking.scheme", "ngram"),),
                paper="MacBERT-large without n-gram masking (w/o NM): CMRC test F1 89.8 "
                "against 90.7 with it; average 86.89 against 87.18",
            ),
        ),
        tasks=("cmrc2018", "chnsenticorp", "msra_ner"),
        paper_order=("n-gram", "whole word", "character"),
        note=(
            "BERT's recipe (segment pairs with NSP, 80/10/10) with only the selection changed: "
            "characters, jieba words (the paper segments with LTP), or MacBERT's n-grams of 1-4 "
            "whole words (40/30/20/10%). Paper figures: max (mean) of 10 runs, BERT and BERT-wwm "
            "base from github.com/ymcui/Chinese-BERT-wwm's README (its CMRC 2018, ChnSentiCorp and "
            "NER tables; BERT-wwm continues Google's BERT for 200k steps). The n-gram row stands "
            "for MacBERT's ablation of MacBERT-large (test scores; the table 'Ablations of "
            "MacBERT-large' in the journal version of arXiv 1906.08101, IEEE TASLP 2021; the "
            "Findings of EMNLP 2020 text could not be read here), where removing n-gram masking "
            "(w/o NM) costs accuracy; MacBERT keeps whole words and adds its correction."
        ),
        paper_runs=dict(num_steps=100_000, batch_size=2560),
        micro_tasks=("chnsenticorp",),
    ),
}


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
    from zhlm import workdir as layout
    from zhlm.finetune.train import finetune
    from zhlm.train import metrics
    from zhlm.train.loop import train_and_evaluate

    scale = SCALES[scale_name]
    folder = os.path.join(workdir, _folder(variant))
    pre = os.path.join(folder, "pretrain")
    config = pretrain_config(variant, scale)
    timing = _Timing(folder)
    steps = layout.checkpoint_steps(pre)
    if not steps or steps[-1] < config.train.num_steps:  # no finished pretraining yet
        with timing("pretrain"):
            train_and_evaluate(config, pre)
    evals = metrics.read(pre, "eval")
    out = {"pretrain": evals[-1] if evals else {}, "params": _count(config)}
    for task in scale_tasks(ablation, scale_name):
        done = os.path.join(folder, task, layout.RESULTS)
        if os.path.isfile(done):
            with open(done, encoding="utf-8") as f:
                out[task] = json.load(f)
        else:
            with timing(task):
                ft_config = finetune_config(task, scale_name)
                out[task] = finetune(ft_config, pre, os.path.join(folder, task))
    out["minutes"] = timing.total()
    return out


def _compilation_cache(workdir: str) -> None:
    """XLA's persistent cache under the workdir: the variants' fine-tuning steps (and the
    pretraining steps of variants that differ only in data) are the same programs, compiled
    once across variants, tables and reruns."""
    import jax

    jax.config.update("jax_compilation_cache_dir", os.path.join(workdir, "xla-cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _folder(variant: Variant) -> str:
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


def _count(config) -> int:
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


def paper_commands(name: str) -> str:
    """The ``paper`` scale: the exact commands of every run of the ablation at base size."""
    ablation = ABLATIONS[name]
    lines = [
        f"### {ablation.title}: commands at the paper's scale",
        "",
        "Each distinct dataset is prepared once from your corpus, then every run goes to a "
        "TPU VM or pod slice (`launch_tpu.sh ... -- <zhlm-pretrain flags>` for pretraining):",
        "",
        "```bash",
    ]
    train = " ".join(f"--config.train.{k}={v}" for k, v in ablation.paper_runs.items())
    prepared = set()
    for variant in ablation.variants:
        folder = _folder(variant)
        flags = " ".join(_flag(k, v) for k, v in variant.overrides)
        data_flags = " ".join(_flag(k, v) for k, v in variant.overrides if k.startswith("data."))
        config = pretrain_config(variant, None)
        data = f"gs://BUCKET/data/{variant.recipe}-{config.data.format}"
        if config.data.fields:
            data += "-" + "-".join(f.removesuffix("_ids") for f in config.data.fields)
        inputs = "--input='gs://BUCKET/corpus/*.txt'"
        if config.data.dialogue_sources:
            data += "-dlm"
            inputs = "--input='text=gs://BUCKET/corpus/*.txt' " + " ".join(
                f"--input='{name}=gs://BUCKET/{name}/*.jsonl'"
                for name in config.data.dialogue_sources
            )
        if data not in prepared:
            prepared.add(data)
            lines.append(
                f"zhlm-prepare --config=configs/{variant.recipe}.py:base {data_flags} "
                f"{inputs} --data_dir={data}".replace("  ", " ")
            )
        work = f"gs://BUCKET/{name}/{folder}"
        lines.append(
            f"zhlm-pretrain --config=configs/{variant.recipe}.py:base --workdir={work} "
            f"--config.data.data_dir={data} {train} {flags}".rstrip()
        )
        for task in ablation.tasks:
            files = task_files(task, "$DATA")  # fine-tuning reads local files
            lines.append(
                f"zhlm-finetune --config=configs/finetune/{task}.py --init={work} "
                f"--workdir={work}/{task} --config.train.seeds=10 "
                + " ".join(f"--config.task.{k}={v}" for k, v in files.items() if v)
            )
    lines += [
        "```",
        "",
        "`$DATA`: a local copy of the task files (the layout of this repository's "
        "`../shared/data`). "
        "Base size (L12/H768), the recipe's optimizer and masking, the papers' step counts and "
        "batch sizes; 10 fine-tuning seeds as Chinese-BERT-wwm and MacBERT report (max and "
        "mean). " + ablation.note,
    ]
    return "\n".join(lines)


def _flag(key: str, value) -> str:
    """``--config.KEY=VALUE`` as a shell takes it: tuples quoted as Python literals."""
    if isinstance(value, tuple):
        return f'--config.{key}="{value!r}"'
    return f"--config.{key}={value}"


# ALBERT Tables 3 and 4 (ALBERT-base, 30k vocabulary): (sharing, E) -> published parameters.
ALBERT_PARAMS = {
    ("none", 64): 87e6,
    ("none", 128): 89e6,
    ("none", 256): 93e6,
    ("none", 768): 108e6,
    ("all", 64): 10e6,
    ("all", 128): 12e6,
    ("all", 256): 16e6,
    ("all", 768): 31e6,
    ("attention", 128): 64e6,
    ("attention", 768): 83e6,
    ("ffn", 128): 38e6,
    ("ffn", 768): 57e6,
}


def albert_params_table() -> str:
    """Every parameter count of ALBERT Tables 3/4 from ``jax.eval_shape`` of our ALBERT-base
    (the full pretraining model, as the paper counts it), with the published figure."""
    lines = [
        "### ALBERT Tables 3/4 parameters (ALBERT-base, L12/H768, 30k vocabulary)",
        "",
        "| sharing | E | paper | ours | difference |",
        "|---|---|---|---|---|",
    ]
    for (share, width), paper in ALBERT_PARAMS.items():
        config = config_files.load("albert", "base")
        config.model.update(vocab_size=30000, share_layers=share)
        config.model.embed_dim = 0 if width == 768 else width  # E=H: no projection
        ours = _count(config)
        lines.append(
            f"| {share} | {width} | {paper / 1e6:.0f}M | {ours / 1e6:.2f}M "
            f"| {100 * (ours - paper) / paper:+.1f}% |"
        )
    lines += [
        "",
        "The paper rounds to the nearest million. E=768 equals H: no factorisation and no E->H",
        "projection, as in BERT; 'attention' / 'ffn' share only those sublayers across layers.",
    ]
    return "\n".join(lines)
