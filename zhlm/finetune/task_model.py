"""A fine-tuned model loaded once (:class:`TaskModel`), and its predictions for a list of
examples as records, one per example in their order.

Why apart from the file front end (:mod:`zhlm.finetune.predict`): loading the parameters, the
tokenizer and the jitted forward pass is done once, while prediction comes a chunk at a time,
from a file or from memory. :func:`_records` asks the task kind (``zhlm.finetune.kinds``) to
featurize, decode and make the records; whatever feeds it examples knows no kind. Each record
has the example's ``id`` and

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

from zhlm import workdir as layout
from zhlm.finetune import batching, kinds, tasks
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


def _records(task, examples, tokenizer, forward, config) -> list[dict]:
    """The task kind's records (``zhlm.finetune.kinds``) of ``examples``, in their order."""
    kind = kinds.get(task.kind)
    features = kind.featurize(examples, tokenizer, task, training=False)
    outputs = batching.run(
        lambda batch: kind.device_outputs(forward(batch), batch),
        features.arrays,
        config.train.batch_size,
        task.length_buckets,
    )
    return kind.records(examples, kind.decode(features, outputs, examples, task), task)
