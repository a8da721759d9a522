"""The interface every task kind implements, with the defaults most kinds keep.

A kind is a frozen dataclass (hashable, so it can be a static argument or a module field): its
fields are the facts a caller reads (``formats``, ``metric``, ``head``, ``hf_class``), its
methods the steps of the fine-tuning path, in order:

read -> resolve (what the training file settles) -> featurize -> model / loss on device ->
device_outputs -> decode (predictions in input order) -> score / records / write_dev.

Nothing outside ``zhlm.finetune.kinds`` compares a kind by name: training, evaluation,
``zhlm-predict``, ``zhlm.Predictor``, the diagnostics and the Hugging Face export ask the kind.

An example is a frozen dataclass whose first field is its id and whose fields without a default
are its inputs (a text, a pair, a question and its context); the gold fields (label, answers,
tags) and ``line`` have defaults. So one rule builds examples from in-memory records
(:meth:`TaskKind.examples_from`) and puts each example's inputs into its prediction record
(:func:`input_fields`), whatever the kind.
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

    def example_type(self, task) -> type | None:
        """The dataclass of this kind's examples (see the module docstring), which
        :meth:`examples_from` builds; None: the kind takes no in-memory inputs."""
        return None

    def examples_from(self, records, task) -> list:
        """Examples of in-memory inputs (``zhlm.Predictor``): each record a dict holding the
        example class's inputs (:func:`required_fields`) and optionally an ``id`` (default: its
        position in ``records``, from 0); other keys (a label) are not read, the gold fields
        take their defaults. Kinds whose examples need more than their inputs (NER's tags)
        override it and call this."""
        cls = self.example_type(task)
        if cls is None:
            raise ValueError(f"kind {self.name} takes no in-memory inputs: predict from a file")
        id_field, *inputs = required_fields(cls)
        examples, ids = [], set()
        for index, record in enumerate(records):
            where = f"input {index}"
            if not isinstance(record, dict) or any(name not in record for name in inputs):
                got = (
                    f"has fields {sorted(record)}"
                    if isinstance(record, dict)
                    else f"is a {type(record).__name__}"
                )
                raise ValueError(f"{where} {got}; kind {self.name} reads {_spell(inputs)}")
            for name in inputs:
                value = record[name]
                if _declared_str(cls, name) and not (isinstance(value, str) and value.strip()):
                    raise ValueError(f"{where}: {name} is {value!r}; give a non-empty string")
            key = str(record.get("id", index))
            if key in ids:
                raise ValueError(f"{where}: id {key!r} given twice; give each input its own")
            ids.add(key)
            values = {name: record[name] for name in inputs}
            examples.append(cls(**{id_field: key}, **values, **_line(cls, index + 1)))
        return examples

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

    def stratum(self, example):
        """What a holdout split keeps in proportion on both sides (a label; None: nothing)."""
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
        """The training loss of a model that ignores its input (the labels' frequencies, a
        regression's mean score): a run stuck there learned nothing (None: no such prior)."""
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

    def takes_hf(self, hf_config: dict) -> bool:
        """Whether a Hugging Face task folder of ``self.hf_class`` (its ``config.json``) is
        this kind's (several kinds share a class: a regression has one output)."""
        return True

    def task_from_hf(self, task, hf_config: dict) -> None:
        """Writes into ``task`` what a Hugging Face folder's ``config.json`` settles (the
        labels of ``id2label``)."""
        return None

    def hf_config(self, task) -> dict:
        """Extra ``config.json`` entries of the Hugging Face export."""
        return {}


def required_fields(cls) -> tuple[str, ...]:
    """The fields of example class ``cls`` without a default: its id, then its inputs."""
    return tuple(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def input_fields(example) -> dict:
    """``{name: value}`` of an example's inputs (see the module docstring), which every
    prediction record repeats so that it can be read without its input."""
    return {name: getattr(example, name) for name in required_fields(type(example))[1:]}


def _declared_str(cls, name: str) -> bool:
    (field,) = [f for f in dataclasses.fields(cls) if f.name == name]
    return field.type in (str, "str")


def _line(cls, line: int) -> dict:
    return {"line": line} if "line" in {f.name for f in dataclasses.fields(cls)} else {}


def _spell(names) -> str:
    return "{" + ", ".join(f'"{name}": ...' for name in names) + "}"


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


def entropy(labels: np.ndarray) -> float:
    """Entropy of the label ids ``labels >= 0`` (any shape)."""
    counts = np.bincount(labels[labels >= 0].ravel())
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
