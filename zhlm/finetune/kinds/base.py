"""The interface every task kind implements, with the defaults most kinds keep.

A kind is a frozen dataclass (hashable, so it can be a static argument or a module field): its
fields are the facts a caller reads (``formats``, ``metric``, ``head``, ``hf_class``), its
methods the steps of the fine-tuning path, in order:

read -> resolve (what the training file settles) -> featurize -> model / loss on device ->
device_outputs -> decode (predictions in input order) -> score / records / write_dev.

Nothing outside ``zhlm.finetune.kinds`` compares a kind by name: training, evaluation,
``zhlm-predict``, the diagnostics and the Hugging Face export ask the kind.
"""

from __future__ import annotations

import abc
import dataclasses

import jax
import numpy as np

from zhlm.models import dummy_inputs


@dataclasses.dataclass
class Features:
    """What :meth:`TaskKind.featurize` returns: ``arrays`` go to the device (first axis: rows,
    i.e. sentences or windows); kinds that need host information to decode return a subclass
    or another class with ``arrays``."""

    arrays: dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class TaskKind(abc.ABC):
    name: str  # config.task.kind
    formats: tuple[str, ...]  # config.task.format values it reads
    metric: str  # the primary dev metric, higher is better (results.json "metric")
    head: str  # the head's parameter name, the same as Hugging Face's module name
    hf_class: str  # Hugging Face architecture suffix, e.g. "ForSequenceClassification"

    # ---------------------------------------------------------------------------- reading

    @abc.abstractmethod
    def read(self, path, task, require_label: bool = True):
        """``(examples, report)`` of one file in ``task.format``."""

    def stream(self, path, task, require_label: bool = True):
        """``(examples as they are read, report complete once they are)``; kinds whose
        formats can be read a record at a time override it, the rest read the file whole."""
        examples, report = self.read(path, task, require_label)
        return iter(examples), report

    def describe_formats(self) -> str:
        """The formats it reads, for an error about a file none of them could read."""
        return "format " + " or ".join(self.formats)

    def unreadable(self, path, task) -> str | None:
        """Where no record of a file could be read: what it looks like (else None)."""
        return None

    def resolve(self, task, train) -> None:
        """Settles what the training file decides (labels), writes it into ``task``."""
        return None  # a kind whose training file settles nothing

    def check_split(self, task, train, evaluation) -> None:
        """Fails, saying why, when the training examples (after a holdout split) cannot
        train this kind."""
        return None  # any non-empty split trains a kind without classes

    def group(self, example):
        """The holdout unit: examples sharing a key stay on one side (None: the record)."""
        return None

    def for_training(self, examples):
        """The examples a loss can learn from."""
        return examples

    # ----------------------------------------------------------------------------- device

    @abc.abstractmethod
    def featurize(self, examples, tokenizer, task, training: bool):
        """Fixed-shape arrays (and what decode needs); ``training`` False tolerates unknown
        labels (evaluation and prediction)."""

    def example_inputs(self, task):
        """Shapes of the ``(input_ids, token_type_ids, attention_mask)`` the model is
        initialised with."""
        return jax.eval_shape(lambda: dummy_inputs(task.max_seq_length))

    @abc.abstractmethod
    def model(self, cfg, task):
        """The task model: a ``zhlm.models.Model`` subclass whose head is ``self.head``."""

    @abc.abstractmethod
    def loss(self, outputs: dict, batch: dict):
        """Per row: ``(loss sum, number of targets)``; the step weighs rows and divides once."""

    def device_outputs(self, outputs: dict, batch: dict) -> dict:
        """What leaves the device after a forward pass."""
        return outputs

    # ---------------------------------------------------------------------------- results

    @abc.abstractmethod
    def decode(self, features, outputs: dict, examples, task):
        """Predictions in input order from the host outputs of every row."""

    @abc.abstractmethod
    def score(self, features, examples, predictions) -> dict[str, float]:
        """Dev metrics (percent), ``self.metric`` among them."""

    def prior(self, arrays: dict) -> float | None:
        """Loss of predicting the training labels' frequencies (None: no such prior)."""
        return None

    def baseline(self, arrays: dict, task) -> dict:
        """Extra results.json entries about the evaluation set."""
        return {}

    @abc.abstractmethod
    def records(self, examples, predictions, task) -> list[dict]:
        """``zhlm-predict``'s records, one per example, each with its ``id``."""

    def write_dev(self, root, examples, predictions) -> dict:
        """Writes the best run's dev predictions under ``root``; returns results.json entries."""
        return {}

    def hf_config(self, task) -> dict:
        """Extra ``config.json`` entries of the Hugging Face export."""
        return {}


def label_config(labels) -> dict:
    """``id2label`` and ``label2id`` of a Hugging Face config for the head's outputs."""
    return {
        "id2label": dict(enumerate(labels)),
        "label2id": {label: i for i, label in enumerate(labels)},
    }


def entropy(labels: np.ndarray) -> float:
    """Entropy of the label ids ``labels >= 0`` (any shape)."""
    counts = np.bincount(labels[labels >= 0].ravel())
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
