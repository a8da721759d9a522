"""Sentence and sentence-pair classification: one label per example from the pooled [CLS].

``[CLS] text [SEP]``, or for a pair ``[CLS] a [SEP] b [SEP]`` with segment ids 0/1, the longer
text losing its last token first until the pair fits (BERT's ``_truncate_seq_pair``). One class
serves both: a pair differs only in reading two texts (``texts=2``), so it is registered twice
(``classification`` and ``pair``) with the same head, loss, metric and export.

Labels: an empty ``task.labels`` becomes the training file's labels (numbers in numeric order,
else sorted), written back into ``task`` so that the head, the metrics and the saved config see
one order; evaluation labels outside it are reported as ``unknown_label``. With
``task.label_names`` (a file naming the ids) the labels are the names, in that file's order
(:mod:`zhlm.finetune.readers.labels`), so results, predictions and exports name the classes.

The numerics are ``BertForSequenceClassification``'s (dropout on the pooled output, a Dense,
cross-entropy), which the Hugging Face parity tests check.
"""

from __future__ import annotations

import collections
import dataclasses
import decimal
from collections.abc import Sequence
from typing import ClassVar

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from zhlm.convert import layout
from zhlm.errors import UserError
from zhlm.finetune.kinds.base import Export, Features, TaskKind, cross_entropy, entropy, softmax
from zhlm.finetune.kinds.windows import special_ids, truncate_pair
from zhlm.finetune.metrics.classes import class_scores
from zhlm.finetune.readers import sniff
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.labels import LabelNames, number_spelling
from zhlm.finetune.readers.tables import TableReader
from zhlm.models import Model
from zhlm.models.layers import dense


class SequenceClassifier(Model):
    """``{"logits": [B, num_labels]}`` from the pooled [CLS] state (sentence or pair tasks).

    Packed rows (:mod:`zhlm.finetune.packing`) give ``segment_ids`` [B,S] and
    ``instance_starts`` [B,K]: each example is pooled at its own [CLS], ``logits`` [B,K,C]."""

    num_labels: int = 2

    def setup(self):
        super().setup()
        self.dropout = nn.Dropout(self.config.dropout_rate)
        self.classifier = dense(self.config, self.num_labels, ("embed", "norm"), None)

    def __call__(
        self,
        input_ids,
        token_type_ids,
        attention_mask,
        deterministic=True,
        segment_ids=None,
        instance_starts=None,
    ):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic, segment_ids)
        pooled = self.dropout(self.pooler(x, instance_starts), deterministic)
        return {"logits": self.classifier(pooled).astype(jnp.float32)}


@dataclasses.dataclass
class LabelledFeatures(Features):
    labels: tuple[str, ...]  # the label of each class id, for per-class scores


@dataclasses.dataclass(frozen=True)
class Classification(TaskKind):
    readout: ClassVar[str] = "instance"  # packed: each example at its own [CLS]
    metric: str = "accuracy"
    reader: Reader = TableReader(texts=1)
    export: Export = Export("ForSequenceClassification", layout.CLASSIFIER, "labels")

    def settle(self, task, train):
        counts = collections.Counter(e.label for e in train)
        given = bool(task.labels)
        names = LabelNames.read(task.label_names) if task.label_names else None
        if names is not None:  # the reader has named every label: the classes are the names
            task.labels = names.given(task.labels) if given else tuple(names.names.values())
        if not given and names is None:
            found = sorted(counts, key=_label_order)
            if len(train) >= 10 and len(found) > len(train) / 2:
                looks = sniff.describe(task.train_file, self.reader.texts)
                raise UserError(
                    f"{task.train_file}: {len(found)} distinct labels in {len(train)} records: "
                    "is the label column where it was looked for? (config.task.labels takes "
                    f"them as they are) The file looks like: {looks}"
                )
            task.labels = tuple(found)
        shown = ", ".join(f"{label} ({counts[label]})" for label in task.labels)
        how = "config.task.labels" if given else "inferred, in this order"
        if names is not None:
            how = (
                f"{how}, named by {names.path}" if given else f"named by {names.path}, in its order"
            )
        print(f"zhlm-finetune: labels of {task.train_file} ({how}): {shown}", flush=True)
        if not given and names is None:
            _warn_rare(task.train_file, train, counts)

    def holdout(self, example):
        return None, example.label

    def training_examples(self, task, train):
        present = collections.Counter(e.label for e in train)
        if len(present) < 2:
            (label,) = present or [None]
            raise UserError(
                f"{task.train_file}: every training record has label {label!r}; a classifier "
                "needs two classes or more: check the label column (config.task.label_field)"
            )
        return train

    def featurize(self, examples, tokenizer, task, training):
        args = (tokenizer, task.labels, task.max_seq_length, training)
        arrays = classification_features(examples, *args)
        return LabelledFeatures(arrays, tuple(task.labels))

    def model(self, cfg, task):
        return SequenceClassifier(cfg, len(task.labels))

    def loss(self, outputs, batch):
        ce = cross_entropy(outputs["logits"], batch["label"])
        return ce, jnp.ones_like(ce)

    def decode(self, features, outputs, examples, task):
        return outputs["logits"]

    def score(self, features, examples, predictions):
        guess = np.argmax(predictions, -1)
        return class_scores(features.arrays["label"], guess, features.labels)

    def chance(self, arrays):
        counts = np.bincount(arrays["label"][arrays["label"] >= 0])
        rate = 100 * float(counts.max() / counts.sum()) if counts.sum() else 0.0
        return {"loss": entropy(arrays["label"]), "majority_rate": rate}

    def records(self, examples, predictions, task):
        probs = softmax(predictions, -1)
        return [
            dict(
                id=e.guid,
                label=task.labels[int(np.argmax(p))],
                probabilities={label: float(q) for label, q in zip(task.labels, p, strict=True)},
            )
            for e, p in zip(examples, probs, strict=True)
        ]


def _label_order(label: str):
    """Numbers first, in numeric order, then the other labels sorted."""
    number = number_spelling(label)
    return (0, decimal.Decimal(number), "") if number is not None else (1, 0, label)


def classification_features(
    examples, tokenizer, labels: Sequence[str], max_seq_length: int, strict: bool = True
):
    """``input_ids, token_type_ids, attention_mask`` [N,S] and ``label`` [N] for sentence or
    pair examples (a pair has ``text_b``); label ids follow the order of ``labels``. A label
    outside them fails when ``strict``, else is -1 (inputs to predict may carry any label)."""
    cls, sep, pad = special_ids(tokenizer)
    pair = bool(examples) and hasattr(examples[0], "text_b")
    encoded_a = tokenizer.encode_batch([e.text_a if pair else e.text for e in examples])
    encoded_b = tokenizer.encode_batch([e.text_b for e in examples]) if pair else None
    n = len(examples)
    ids = np.full((n, max_seq_length), pad, np.int32)
    types = np.zeros((n, max_seq_length), np.int32)
    mask = np.zeros((n, max_seq_length), np.int32)
    label_index = {label: i for i, label in enumerate(labels)}
    for row, a in enumerate(encoded_a):
        if pair:
            b = encoded_b[row].ids
            len_a, len_b = truncate_pair(len(a.ids), len(b), max_seq_length - 3)
            tokens = [cls, *a.ids[:len_a], sep, *b[:len_b], sep]
            types[row, len_a + 2 : len(tokens)] = 1
        else:
            tokens = [cls, *a.ids[: max_seq_length - 2], sep]
        ids[row, : len(tokens)] = tokens
        mask[row, : len(tokens)] = 1
    # No label (inputs to predict): -1, which no loss or metric ever reads.
    unknown = None if strict else -1
    label = [-1 if e.label is None else label_index.get(e.label, unknown) for e in examples]
    if None in label:
        e = examples[label.index(None)]
        raise UserError(f"{e.guid}: label {e.label!r} not in {list(labels)}")
    label = np.array(label, np.int32)
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask, label=label)


def _warn_rare(path, train, counts):
    """A warning naming the records of each inferred class under 1% of the rows (or under 5):
    a typo in a label column becomes a class of its own."""
    for label, n in sorted(counts.items(), key=lambda item: item[1]):
        if n >= 5 and n >= 0.01 * len(train):
            break
        lines = [str(e.line) for e in train if e.label == label][:5]
        more = ", ..." if n > len(lines) else ""
        print(
            f"zhlm-finetune: warning: label {label!r} has only {n} record(s) in {path} (lines "
            f"{', '.join(lines)}{more}): a typo? Fix those rows or list the labels in "
            "config.task.labels (the rows with other labels are then reported and skipped)",
            flush=True,
        )
