"""A fine-tuned model loaded once (:class:`TaskModel`), and its predictions for a list of
examples as records, one per example in their order.

Why apart from the file front end (:mod:`zhlm.finetune.predict`): loading the parameters, the
tokenizer and the jitted forward pass is done once, while prediction comes a chunk at a time,
from a file or from memory. :func:`_records` asks the task kind (``zhlm.finetune.kinds``) to
featurize, decode and make the records; whatever feeds it examples knows no kind. Each record
has the example's ``id``, its inputs (``text``; ``text_a`` and ``text_b``; ``question`` and
``context``: :func:`zhlm.finetune.readers.base.input_fields`), and

* classification / pair: ``label`` and ``probabilities`` (label -> softmax probability);
* mrc: ``answer`` and ``score`` (the span's start + end logit; questions without any allowed
  span get ``""`` and no score);
* ner: ``text`` and ``entities`` (``type``, ``start``, ``end``, ``text``; end exclusive).
* multiple_choice: ``answer`` (the chosen option), ``option`` (its index) and
  ``probabilities`` (one per option);
* regression: ``score``.

The examples are packed several a row where the kind reads packed rows out
(:mod:`zhlm.finetune.packing`; ``pack=False`` or ``task.pack`` False: length buckets); the
records are the same either way, up to float rounding.

The model, its label set, tokenizer (the ``vocab.txt`` saved in ``best/``) and featurization
options come from the fine-tuning run; ``task.format`` is the run's unless the caller names
another, since inputs to predict may come in any readable format.
"""

from __future__ import annotations

import json

import jax

from zhlm import defaults, paths, run_files
from zhlm.errors import NotFound, UserError
from zhlm.finetune import batching, kinds, packing, saved, task_files
from zhlm.finetune.readers.base import input_fields
from zhlm.models import model_config
from zhlm.train import checkpoint
from zhlm.train.checkpoint import VOCAB


class TaskModel:
    """A fine-tuned model ready to predict: ``TaskModel.load(workdir).predict(examples)``."""

    def __init__(self, kind, model, params, config, tokenizer):
        self.kind, self.config, self.tokenizer = kind, config, tokenizer
        forward = jax.jit(
            lambda p, b: model.apply(
                {"params": p}, *batching.model_inputs(b), **batching.packed_inputs(b)
            )
        )
        self._forward = lambda batch: forward(params, batch)

    @property
    def task(self):
        """The run's ``config.task``: kind, labels, format and the featurization options."""
        return self.config.task

    @classmethod
    def load(
        cls, source: str, fmt: str = "", text_fields=(), kind: str = "", pack: bool = True
    ) -> TaskModel:
        """The model of ``source``, a fine-tuning workdir, its ``best/`` or a Hugging Face
        task folder (:func:`from_hf`; ``kind`` picks among kinds of one class); ``fmt`` and
        ``text_fields`` say how inputs are read when not as the run's data was; ``pack``
        False predicts in length buckets, one example a row (``task.pack``)."""
        best = run_files.finetuned_params(source)
        if best:
            model, params, config = saved.load_finetuned(best)
            found = kinds.get(config.task.kind)
        elif _hf_config(source) is not None:
            found, model, params, config = from_hf(source, kind)
        else:
            raise NotFound(
                f"{source}: no fine-tuned model (a zhlm-finetune workdir with {run_files.BEST}/, "
                "or a Hugging Face task folder with config.json)"
            )
        task = config.task
        task.unlock()  # unlike a user's config, the saved one may take the input's format
        task.format = fmt or task.format
        task.pack = bool(pack)
        if text_fields:
            task.text_fields = tuple(text_fields)
        vocab = run_files.path(best, VOCAB) if best else None  # the run's, beside its params
        task.vocab = str(vocab) if vocab and vocab.is_file() else task.vocab
        return cls(found, model, params, config, task_files.load_tokenizer(task))

    def predict(self, examples) -> list[dict]:
        """One record per example (see the module docstring), in the examples' order."""
        return _records(self.kind, self.task, examples, self.tokenizer, self._forward, self.config)


def from_hf(source: str, kind_name: str = ""):
    """``(kind, model, params, config)`` of a Hugging Face task folder
    (``BertForSequenceClassification`` and the others a kind exports): the kind from its
    architecture and config (``kinds.for_hf``), its labels from ``id2label``, the encoder and the
    trained head from its weights, the vocabulary from its ``vocab.txt`` or ``tokenizer.json``. A
    folder without the head's weights is refused (its head would be random)."""
    hf_config = _hf_config(source)
    kind = kinds.for_hf(hf_config, kind_name)
    loaded = checkpoint.load(source)
    config = defaults.get_finetune_config()
    checkpoint.adopt_model(config, loaded.config.model)
    task = config.task
    task.kind, task.format, task.vocab = kind.name, kind.formats[0], loaded.vocab
    task.max_seq_length = min(512, config.model.max_position_embeddings)
    kind.export.task_from(task, hf_config)
    model = kind.model(model_config(config.model), task)
    fresh = saved.init_params(model, jax.random.key(0), kind.example_inputs(task))
    params, left_fresh = saved.merge(fresh, loaded.with_task_heads(), kind.export.head)
    if kind.export.head in left_fresh:
        raise UserError(
            f"{source}: no trained {kind.export.head!r} of {kind.name} in its weights (a random "
            "head predicts nothing): fine-tune it with zhlm-finetune --init=FOLDER first"
        )
    return kind, model, params, config


def _hf_config(source: str) -> dict | None:
    """A Hugging Face folder's ``config.json`` with its architecture, or None."""
    path = run_files.path(source, "config.json")
    if paths.is_remote(source) or not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) and value.get("architectures") else None


def _records(kind, task, examples, tokenizer, forward, config) -> list[dict]:
    """The task kind's records (``zhlm.finetune.kinds``) of ``examples``, in their order."""
    features = kind.featurize(examples, tokenizer, task, training=False)
    outputs = packing.forward_all(
        kind,
        task,
        lambda batch: kind.device_outputs(forward(batch), batch),
        features.arrays,
        config.train.batch_size,
    )
    records = kind.records(examples, kind.decode(features, outputs, examples, task), task)
    if len(records) != len(examples):  # the file front end relies on one line per input
        raise RuntimeError(f"{len(records)} predictions for {len(examples)} inputs")
    return [{"id": r["id"], **input_fields(e), **r} for e, r in zip(examples, records, strict=True)]
