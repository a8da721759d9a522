"""Sentence and sentence-pair regression: one real-valued score per example from the pooled
[CLS] (STS-B: how alike two sentences are, 0 to 5).

Its reader is a pair table (:class:`~zhlm.finetune.readers.tables.TableReader` with two texts
and scores: the formats, fields and pair truncation of the ``pair`` kind); the label column
holds a number instead of a class. A score that is not a finite number is reported and its record
skipped, as a classifier's unknown label is (``unknown_label``, file and line); ``task.labels``
does not apply and must stay empty.

The numerics are ``BertForSequenceClassification``'s with ``num_labels=1`` and
``problem_type="regression"``: dropout on the pooled output, a Dense to one output, the mean
squared error of that output against the score (Hugging Face's ``MSELoss`` of
``logits.squeeze()``), here each row's squared error counted once.

Metrics: Pearson and Spearman correlation of the predictions with the gold scores, in percent,
and the mean squared error. The primary metric is Spearman: the BERT paper reports Spearman
correlations for STS-B, as do the Chinese STS-B results of the sentence-embedding papers
(GLUE's leaderboard averages Pearson and Spearman); a rank correlation does not reward a model
for matching the scale of a score whose steps annotators do not use evenly.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from zhlm.convert import layout
from zhlm.errors import UserError
from zhlm.finetune.kinds.base import Export, Features
from zhlm.finetune.kinds.classification import (
    Classification,
    SequenceClassifier,
    classification_features,
)
from zhlm.finetune.metrics.correlation import pearson, spearman
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.tables import NUMBERS, TableReader


@dataclasses.dataclass(frozen=True)
class Regression(Classification):
    metric: str = "spearman"
    reader: Reader = TableReader(texts=2, scores=True)
    export: Export = Export("ForSequenceClassification", layout.CLASSIFIER, "score")

    def settle(self, task, train):
        if task.labels:
            raise UserError(
                f"config.task.labels={tuple(task.labels)} does not apply to kind {self.name} "
                "(its labels are numbers): leave it empty"
            )
        scores = np.array([float(e.label) for e in train])
        if not len(scores):
            return  # no record: reading has reported why, and the split check refuses it
        print(
            f"zhlm-finetune: scores of {task.train_file}: {len(scores)} records, mean "
            f"{scores.mean():.4g}, standard deviation {scores.std():.4g}, from "
            f"{scores.min():.4g} to {scores.max():.4g}",
            flush=True,
        )

    def holdout(self, example):
        return None, None  # a score is not a class: the holdout draws from all records alike

    def training_examples(self, task, train):
        present = {float(e.label) for e in train}
        if len(present) < 2:
            (score,) = present or [None]
            raise UserError(
                f"{task.train_file}: every training record has score {score}; a regression "
                "needs scores that differ: check the score column (config.task.label_field)"
            )
        return train

    def featurize(self, examples, tokenizer, task, training):
        # The distinct score texts serve as classification's label set, so its layout is
        # reused as it is; each label id then maps back to its number.
        texts = sorted({e.label for e in examples if e.label is not None})
        arrays = classification_features(examples, tokenizer, texts, task.max_seq_length)
        # No score (inputs to predict, or one that is not a number): NaN, which no loss or
        # metric reads (prediction has no labels, training and evaluation read only numbers).
        values = np.array([_number(t) for t in texts] + [math.nan], np.float32)
        arrays["label"] = values[arrays["label"]]  # id -1 picks the NaN at the end
        return Features(arrays)

    def model(self, cfg, task):
        return SequenceClassifier(cfg, 1)

    def loss(self, outputs, batch):
        error = outputs["logits"][..., 0] - batch["label"]  # [B] or, packed, [B,K]
        return jnp.square(error), jnp.ones_like(error)

    def decode(self, features, outputs, examples, task):
        return outputs["logits"][:, 0]

    def score(self, features, examples, predictions):
        """Pearson and Spearman correlation (percent) and the mean squared error (not a
        percent) of ``predictions`` against the gold scores."""
        gold = features.arrays["label"].astype(np.float64)
        guess = np.asarray(predictions, np.float64)
        return {
            "spearman": 100 * spearman(gold, guess),
            "pearson": 100 * pearson(gold, guess),
            "mse": float(np.mean(np.square(guess - gold))) if len(gold) else 0.0,
        }

    def chance(self, arrays):
        """The mean squared error of predicting the scores' mean (their variance): the training
        loss a model that ignores its input reaches, and on an evaluation set
        ``constant_mse``, the least a constant prediction reaches there (a dev ``mse`` not
        below it learned nothing)."""
        variance = float(np.var(arrays["label"].astype(np.float64)))
        return {"loss": variance, "constant_mse": variance}

    def records(self, examples, predictions, task):
        return [dict(id=e.guid, score=float(p)) for e, p in zip(examples, predictions, strict=True)]


def _number(text: str) -> float:
    return float(text) if text in NUMBERS else math.nan
