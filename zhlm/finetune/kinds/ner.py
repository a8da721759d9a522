"""Named-entity recognition as token classification: one BIO tag per word, windows over long
sentences, entities scored as conlleval does.

Reading and writing the tag and span files is :mod:`zhlm.finetune.ner_files`; windows, labels
and merging predictions back :mod:`zhlm.finetune.ner_features`; the metric
:mod:`zhlm.finetune.ner_metric`. This module joins them into a kind. The tags come from
``task.labels``, else the training file's entity types (``O``, ``B-T``, ``I-T``).

The numerics are ``BertForTokenClassification``'s: dropout on every token, a Dense, and
cross-entropy at the labelled tokens (first pieces of words) averaged over them.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import optax

from zhlm.convert import layout
from zhlm.finetune import ner_features, ner_files, ner_metric
from zhlm.finetune.kinds.base import TaskKind, entropy, label_config, labels_from_hf
from zhlm.finetune.kinds.classification import SequenceClassifier
from zhlm.run_files import NER_PREDICTIONS


class TokenClassifier(SequenceClassifier):
    """``{"logits": [B, S, num_labels]}``: a tag per token (NER), as
    ``BertForTokenClassification`` (dropout on the sequence output, then a Dense); the
    sentence classifier's modules, applied to every token instead of the pooled [CLS]."""

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic)
        return {"logits": self.classifier(self.dropout(x, deterministic)).astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class Ner(TaskKind):
    name: str = "ner"
    formats: tuple[str, ...] = ("tagged", "spans_jsonl", ner_files.PLAIN)
    metric: str = "f1"
    head: str = layout.CLASSIFIER
    hf_class: str = "ForTokenClassification"

    def read(self, path, task, require_label=True):
        if task.format == "tagged":
            return ner_files.read_tagged(path, task.scheme)
        if task.format == ner_files.PLAIN:
            return ner_files.read_plain(path, require_label)
        return ner_files.read_spans_jsonl(path)

    def stream(self, path, task, require_label=True):
        if task.format == "tagged":  # reads the file twice: the scheme first, then sentences
            return ner_files.iter_tagged(path, task.scheme)
        if task.format == ner_files.PLAIN:
            return ner_files.iter_plain(path, require_label)
        return ner_files.iter_spans_jsonl(path)

    def describe_formats(self):
        return (
            "format tagged (char<TAB>tag lines, a blank line after each sentence), "
            'spans_jsonl (JSON lines with a "text") or text (a sentence a line, to predict)'
        )

    def example_type(self, task):
        return ner_files.NerExample

    def examples_from(self, records, task):
        # No tags to read: each character's is O, as in a spans_jsonl record without a label.
        examples = super().examples_from(records, task)
        return [dataclasses.replace(e, tags=("O",) * len(e.text)) for e in examples]

    def resolve(self, task, train):
        if not task.labels:
            task.labels = ner_files.labels(train)
            print(
                f"zhlm-finetune: tags from {task.train_file}: {', '.join(task.labels)}",
                flush=True,
            )

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
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
        return jnp.sum(ce * real, -1), jnp.sum(real, -1)

    def device_outputs(self, outputs, batch):
        return {"tags": jnp.argmax(outputs["logits"], -1)}  # [F,S] ids, not [F,S,L] logits

    def decode(self, features, outputs, examples, task):
        return ner_features.merge(features, outputs["tags"])

    def score(self, features, examples, predictions):
        micro = ner_metric.scores([list(e.tags) for e in examples], predictions)["micro"]
        return {k: micro[k] for k in ("f1", "precision", "recall")}

    def prior(self, arrays):
        return entropy(arrays["labels"])

    def records(self, examples, predictions, task):
        return [
            dict(id=e.guid, text=e.text, entities=ner_files.prediction_records(e, t))
            for e, t in zip(examples, predictions, strict=True)
        ]

    def write_dev(self, root, examples, predictions):
        path = str(root / NER_PREDICTIONS)
        ner_files.write_predictions(path, examples, predictions)
        # The micro scores are the epoch's metrics; per type they say which entities it finds.
        gold = [list(e.tags) for e in examples]
        return {"predictions": path, "by_type": ner_metric.scores(gold, predictions)["by_type"]}

    def task_from_hf(self, task, hf_config):
        task.labels = labels_from_hf(hf_config)

    def hf_config(self, task):
        return label_config(task.labels)
