"""Named-entity recognition as token classification: one BIO tag per word, windows over long
sentences, entities scored as conlleval does.

Reading the tag and span files is :mod:`zhlm.finetune.readers.ner`; windows, labels and merging
predictions back :mod:`zhlm.finetune.kinds.ner.features`; the predicted entities as records and
the predictions file :mod:`zhlm.finetune.kinds.ner.records`; the metric
:mod:`zhlm.finetune.metrics.conlleval`. This module joins them into a kind. The tags come from
``task.labels``, else the training file's entity types (``O``, ``B-T``, ``I-T``).

The numerics are ``BertForTokenClassification``'s: dropout on every token, a Dense, and
cross-entropy at the labelled tokens (first pieces of words) averaged over them.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp

from zhlm.convert import layout
from zhlm.errors import UserError
from zhlm.finetune.kinds.base import Export, TaskKind, cross_entropy, entropy
from zhlm.finetune.kinds.classification import SequenceClassifier
from zhlm.finetune.kinds.ner import features as ner_features
from zhlm.finetune.kinds.ner import records as ner_records
from zhlm.finetune.metrics import conlleval
from zhlm.finetune.readers import ner as ner_reader
from zhlm.finetune.readers.base import Reader
from zhlm.run_files import NER_PREDICTIONS


class TokenClassifier(SequenceClassifier):
    """``{"logits": [B, S, num_labels]}``: a tag per token (NER), as
    ``BertForTokenClassification`` (dropout on the sequence output, then a Dense); the
    sentence classifier's modules, applied to every token instead of the pooled [CLS].
    Packed rows give ``segment_ids``; ``instance_starts`` is taken and not needed (every token
    is read out)."""

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
        return {"logits": self.classifier(self.dropout(x, deterministic)).astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class Ner(TaskKind):
    readout: ClassVar[str] = "token"  # packed: every token, its label with it
    name: str = "ner"
    metric: str = "f1"
    reader: Reader = ner_reader.NerReader()
    export: Export = Export("ForTokenClassification", layout.CLASSIFIER, "labels")

    def settle(self, task, train):
        if not task.labels:
            task.labels = ner_reader.labels(train)
            print(
                f"zhlm-finetune: tags from {task.train_file}: {', '.join(task.labels)}",
                flush=True,
            )

    def training_examples(self, task, train):
        """The training sentences; refused when none has an entity: a tagger trained on ``O``
        alone predicts ``O`` everywhere (F1 0), as a one-class classifier would."""
        if train and not any(tag != "O" for e in train for tag in e.tags):
            raise UserError(
                f"{task.train_file}: every tag of its {len(train)} training sentences is O; a "
                "tagger needs entities to learn: check the tag column (char<TAB>tag, B-/I- tags)"
            )
        return train

    def featurize(self, examples, tokenizer, task, training):
        # Evaluation and prediction tolerate tags the training file lacked (left out of the
        # loss, still counted by the metric, which reads the examples' own tags).
        stride = ner_features.task_stride(task)
        args = (tokenizer, task.labels, task.max_seq_length, stride)
        return ner_features.ner_features(examples, *args, "raise" if training else "ignore")

    def model(self, cfg, task):
        return TokenClassifier(cfg, len(task.labels))

    def loss(self, outputs, batch):
        """Cross-entropy at the labelled tokens (``labels >= 0``: first pieces of words)."""
        labels = batch["labels"]
        real = (labels >= 0).astype(jnp.float32)
        logits = outputs["logits"]
        ce = cross_entropy(logits, jnp.maximum(labels, 0))
        return jnp.sum(ce * real, -1), jnp.sum(real, -1)

    def device_outputs(self, outputs, batch):
        return {"tags": jnp.argmax(outputs["logits"], -1)}  # [F,S] ids, not [F,S,L] logits

    def decode(self, features, outputs, examples, task):
        return ner_features.merge(features, outputs["tags"])

    def score(self, features, examples, predictions):
        micro = conlleval.scores([list(e.tags) for e in examples], predictions)["micro"]
        return {k: micro[k] for k in ("f1", "precision", "recall")}

    def chance(self, arrays):
        return {"loss": entropy(arrays["labels"])}

    def records(self, examples, predictions, task):
        return [
            dict(id=e.guid, text=e.text, entities=ner_records.prediction_records(e, t))
            for e, t in zip(examples, predictions, strict=True)
        ]

    def write_dev(self, root, examples, predictions):
        path = str(root / NER_PREDICTIONS)
        ner_records.write_predictions(path, examples, predictions)
        # The micro scores are the epoch's metrics; per type they say which entities it finds.
        gold = [list(e.tags) for e in examples]
        return {"predictions": path, "by_type": conlleval.scores(gold, predictions)["by_type"]}
