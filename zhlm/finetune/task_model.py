"""A fine-tuned model loaded once (:class:`TaskModel`), and its predictions for a list of
examples as records, one per example in their order.

Why apart from the file front end (:mod:`zhlm.finetune.predict`): loading the parameters, the
tokenizer and the jitted forward pass is done once, while prediction comes a chunk at a time,
from a file or from memory. Only :func:`_records` knows the task kinds; whatever feeds it
examples knows none. Each record has the example's ``id`` and

* classification / pair: ``label`` and ``probabilities`` (label -> softmax probability);
* mrc: ``answer`` and ``score`` (the span's start + end logit; questions without any allowed
  span get ``""`` and no score);
* ner: ``text`` and ``entities`` (``type``, ``start``, ``end``, ``text``; end exclusive).

The model, its label set, tokenizer (the ``vocab.txt`` saved in ``best/``) and featurization
options come from the fine-tuning run; ``task.format`` is the run's unless the caller names
another, since inputs to predict may come in any readable format.
"""

from __future__ import annotations

import jax
import numpy as np

from zhlm import workdir as layout
from zhlm.finetune import mrc, ner, ner_features, tasks
from zhlm.finetune.train import load_finetuned
from zhlm.train.checkpoint import VOCAB


class TaskModel:
    """A fine-tuned model ready to predict: ``TaskModel.load(workdir).predict(examples)``."""

    def __init__(self, model, params, config, tokenizer):
        self.config, self.tokenizer = config, tokenizer
        forward = jax.jit(lambda p, b: model.apply({"params": p}, *_inputs(b)))
        self._forward = lambda batch: forward(params, batch)

    @property
    def task(self):
        """The run's ``config.task``: kind, labels, format and the featurization options."""
        return self.config.task

    @classmethod
    def load(cls, source: str, fmt: str = "", text_fields=()) -> TaskModel:
        """The model of ``source``, a fine-tuning workdir or its ``best/``; ``fmt`` and
        ``text_fields`` say how inputs are read when not as the run's data was."""
        best = (
            source if layout.is_params_checkpoint(source) else str(layout.path(source, layout.BEST))
        )
        if not layout.is_params_checkpoint(best):
            raise FileNotFoundError(f"{source}: no fine-tuned model (expected {layout.BEST}/)")
        model, params, config = load_finetuned(best)
        task = config.task
        task.unlock()  # unlike a user's config, the saved one may take the input's format
        task.format = fmt or task.format
        if text_fields:
            task.text_fields = tuple(text_fields)
        vocab = layout.path(best, VOCAB)  # the run's vocabulary, saved beside its parameters
        task.vocab = str(vocab) if vocab.is_file() else task.vocab
        return cls(model, params, config, tasks.load_tokenizer(task))

    def predict(self, examples) -> list[dict]:
        """One record per example (see the module docstring), in the examples' order."""
        records = _records(self.task, examples, self.tokenizer, self._forward, self.config)
        if len(records) != len(examples):  # the file front end relies on one line per input
            raise RuntimeError(f"{len(records)} predictions for {len(examples)} inputs")
        return records


def _inputs(batch):
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def _run(arrays, batch_size, forward):
    """The forward pass over ``arrays`` in batches of ``batch_size`` rows (the last padded)."""
    n = len(arrays["input_ids"])
    outputs = []
    for begin in range(0, n, batch_size):
        rows = np.arange(begin, min(begin + batch_size, n))
        padded = np.pad(rows, (0, batch_size - len(rows)))
        out = jax.device_get(forward({k: v[padded] for k, v in arrays.items()}))
        outputs.append({k: v[: len(rows)] for k, v in out.items()})
    return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}


def _records(task, examples, tokenizer, forward, config) -> list[dict]:
    size = config.train.batch_size
    if task.kind == "mrc":
        args = (tokenizer, task.max_seq_length, task.doc_stride, task.max_query_length)
        features = mrc.mrc_features(examples, *args)
        out = _run(features.arrays, size, forward)
        answers = mrc.best_answers(
            features, examples, out["start_logits"], out["end_logits"], task.n_best_size,
            task.max_answer_length,
        )  # fmt: skip
        return [
            dict(id=qid, answer=text, **({"score": score} if text else {}))
            for qid, (text, score) in answers.items()
        ]
    if task.kind == "ner":
        stride = ner_features.task_stride(task)
        features = ner_features.ner_features(
            examples, tokenizer, task.labels, task.max_seq_length, stride, "ignore"
        )
        out = _run(features.arrays, size, forward)
        tags = ner_features.merge(features, np.argmax(out["logits"], -1))
        return [
            dict(id=e.guid, text=e.text, entities=ner.prediction_records(e, t))
            for e, t in zip(examples, tags, strict=True)
        ]
    arrays = tasks.classification_features(examples, tokenizer, task.labels, task.max_seq_length)
    logits = _run({k: v for k, v in arrays.items() if k != "label"}, size, forward)["logits"]
    probs = np.asarray(jax.nn.softmax(logits, -1))
    return [
        dict(
            id=e.guid,
            label=task.labels[int(np.argmax(p))],
            probabilities={label: float(q) for label, q in zip(task.labels, p, strict=True)},
        )
        for e, p in zip(examples, probs, strict=True)
    ]
