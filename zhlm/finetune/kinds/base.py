"""The interface every task kind implements: five parts, in the order a run meets them.

1. **read** (``kind.reader``, a :class:`~zhlm.finetune.readers.base.Reader`): files of its
   formats and in-memory records become examples; then :meth:`TaskKind.settle` writes into
   ``config.task`` what the training file decides (its labels), :meth:`TaskKind.holdout`
   says what a holdout split keeps together and in proportion, and
   :meth:`TaskKind.training_examples` picks (and checks) what the loss learns from.
2. **features**: :meth:`TaskKind.featurize` makes fixed-shape arrays (and what decoding
   needs); :meth:`TaskKind.example_inputs` the shapes the model is initialised with.
3. **head and loss**, on the device: :meth:`TaskKind.model`, :meth:`TaskKind.loss` (per row:
   a sum and a count) and :meth:`TaskKind.device_outputs` (what leaves the device).
4. **decode and score**, on the host: :meth:`TaskKind.decode` (predictions in input order),
   :meth:`TaskKind.score` (the metric, from ``zhlm.finetune.metrics``), :meth:`TaskKind.chance`
   (what a model that ignores its input reaches), :meth:`TaskKind.records` (what
   ``zhlm-predict`` writes) and :meth:`TaskKind.write_dev` (the best run's dev predictions).
5. **export** (``kind.export``, an :class:`Export`): the Hugging Face class and head, and what
   its ``config.json`` carries so the folder reads back as this kind.

A kind is a frozen dataclass (hashable, so it can be a static argument or a module field). The
registry (``zhlm.finetune.kinds``) resolves ``config.task.kind`` once per run; the loop, the
predictor, the diagnostics and the converter then hold the kind object and never compare kind
names.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from zhlm.finetune.readers.base import Reader
from zhlm.models import dummy_inputs

TASK_KEY = "zhlm_task"  # the config.json entry of an export that says how it was fine-tuned
# The task keys an export carries, so a Hugging Face folder predicts as the run did.
EXPORTED_TASK_KEYS = (
    "name", "kind", "format", "text_fields", "labels", "max_seq_length", "doc_stride",
    "max_query_length", "num_choices", "n_best_size", "max_answer_length", "lower_case",
)  # fmt: skip


@dataclasses.dataclass
class Features:
    """What :meth:`TaskKind.featurize` returns: ``arrays`` go to the device (first axis: rows,
    i.e. sentences or windows); kinds that need host information to decode return a subclass
    or another class with ``arrays``."""

    arrays: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class Export:
    """How a kind's model travels as a Hugging Face folder: ``hf_class`` (the architecture's
    suffix, e.g. ``ForSequenceClassification``), ``head`` (the head's parameter name, the same
    as Hugging Face's module name) and what the head's outputs are: ``labels`` (``id2label``),
    ``score`` (one regression output) or ``none`` (answer spans, option scores)."""

    hf_class: str
    head: str
    outputs: str = "none"

    def takes(self, hf_config: dict) -> bool:
        """Whether a folder of ``hf_class`` (its ``config.json``) holds this kind's model
        (several kinds share a class: a regression has one output)."""
        regression = hf_config.get("problem_type") == "regression"
        if self.outputs == "score":
            return regression or hf_config.get("num_labels") == 1
        if self.outputs == "labels":
            return not regression and len(labels_from_hf(hf_config)) > 1
        return True

    def task_from(self, task, hf_config: dict) -> None:
        """Writes into ``task`` what the folder's ``config.json`` settles: the task keys a zhlm
        export carries (:data:`TASK_KEY`), and the labels of ``id2label``."""
        for key, value in (hf_config.get(TASK_KEY) or {}).items():
            if key in EXPORTED_TASK_KEYS and key != "kind":
                task[key] = tuple(value) if isinstance(task[key], tuple) else value
        if self.outputs == "labels":
            task.labels = labels_from_hf(hf_config)

    def config(self, task) -> dict:
        """The export's extra ``config.json`` entries."""
        entries = {TASK_KEY: {key: _plain(task[key]) for key in EXPORTED_TASK_KEYS}}
        if self.outputs == "labels":
            entries.update(label_config(task.labels))
        elif self.outputs == "score":
            entries.update(num_labels=1, problem_type="regression")
        return entries


@dataclasses.dataclass(frozen=True)
class TaskKind(abc.ABC):
    # How packed rows are read out (zhlm.finetune.packing): "instance" (one output per example,
    # at its [CLS]), "token" (every token) or None (the kind does not pack).
    readout: ClassVar[str | None] = None
    name: str  # config.task.kind
    metric: str  # the primary dev metric, higher is better (results.json "metric")
    reader: Reader
    export: Export

    @property
    def formats(self) -> tuple[str, ...]:
        """The ``config.task.format`` values it reads."""
        return self.reader.formats

    # ------------------------------------------------------------------- 1. the training set

    def settle(self, task, train) -> None:
        """Writes into ``task`` what the training file decides (labels) and prints it; fails
        saying why when the file cannot train this kind."""
        return None  # a kind whose training file settles nothing

    def holdout(self, example) -> tuple:
        """``(group, stratum)`` of a holdout split: examples sharing a group stay on one side
        (None: each record alone), and each stratum (a label; None: none) keeps its share."""
        return None, None

    def training_examples(self, task, train) -> list:
        """The training examples (after any holdout split) the loss learns from; fails saying
        why when they cannot train this kind."""
        return train

    # ---------------------------------------------------------------------------- 2. features

    @abc.abstractmethod
    def featurize(self, examples, tokenizer, task, training: bool) -> Features:
        """Fixed-shape arrays (and what decode needs); ``training`` False tolerates unknown
        labels (evaluation and prediction)."""

    def example_inputs(self, task):
        """Shapes of the ``(input_ids, token_type_ids, attention_mask)`` the model is
        initialised with."""
        return jax.eval_shape(lambda: dummy_inputs(task.max_seq_length))

    # ----------------------------------------------------------------------- 3. head and loss

    @abc.abstractmethod
    def model(self, cfg, task):
        """The task model: a ``zhlm.models.Model`` subclass whose head is ``export.head``."""

    @abc.abstractmethod
    def loss(self, outputs: dict, batch: dict):
        """Per row: ``(loss sum, number of targets)``; the step weighs rows and divides once.
        Packed with an ``instance`` read-out, per slot ([B,K]: the outputs and per-example
        fields are [B,K,...]); ``batch["weight"]`` has the same shape."""

    def device_outputs(self, outputs: dict, batch: dict) -> dict:
        """What leaves the device after a forward pass."""
        return outputs

    # ---------------------------------------------------------------------- 4. decode, score

    @abc.abstractmethod
    def decode(self, features, outputs: dict, examples, task):
        """Predictions in input order from the host outputs of every row."""

    @abc.abstractmethod
    def score(self, features, examples, predictions) -> dict[str, float]:
        """Dev metrics (percent), ``self.metric`` among them."""

    def chance(self, arrays: dict) -> dict:
        """What a model that ignores its input reaches on the featurized ``arrays``:
        ``loss`` (the training loss it stays at; absent: no such prior) and the results.json
        entries that say so of an evaluation set (a majority rate, a chance rate)."""
        return {}

    @abc.abstractmethod
    def records(self, examples, predictions, task) -> list[dict]:
        """``zhlm-predict``'s records, one per example, each with its ``id``."""

    def write_dev(self, root, examples, predictions) -> dict:
        """Writes the best run's dev predictions under ``root``; returns results.json entries."""
        return {}


def cross_entropy(logits, labels):
    """Softmax cross-entropy of ``logits`` [..., C] at integer ``labels`` [...] (as optax's
    ``softmax_cross_entropy_with_integer_labels`` computes it: the label's logit subtracted
    from the log-normaliser), here so that predicting needs no optimizer library."""
    label_logits = jnp.take_along_axis(logits, labels[..., None], axis=-1)[..., 0]
    return jax.nn.logsumexp(logits, axis=-1) - label_logits


def labels_from_hf(hf_config: dict) -> tuple[str, ...]:
    """The label names of a Hugging Face config, in output order (``id2label``'s keys are
    strings in ``config.json``)."""
    names = {int(i): str(name) for i, name in hf_config.get("id2label", {}).items()}
    count = hf_config.get("num_labels", len(names) or 2)
    return tuple(names.get(i, str(i)) for i in range(count))


def label_config(labels) -> dict:
    """``id2label`` and ``label2id`` of a Hugging Face config for the head's outputs."""
    return {
        "id2label": dict(enumerate(labels)),
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def softmax(logits, axis: int = -1) -> np.ndarray:
    """The softmax of host ``logits`` in NumPy (float32 as the model computes): a record's
    probabilities, computed where they are, not in a program compiled for every new number
    of rows."""
    logits = np.asarray(logits, np.float32)
    e = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def entropy(labels: np.ndarray) -> float:
    """Entropy of the label ids ``labels >= 0`` (any shape)."""
    counts = np.bincount(labels[labels >= 0].ravel())
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
