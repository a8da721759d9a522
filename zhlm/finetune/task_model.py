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

import dataclasses
import json

import jax
import numpy as np

from zhlm import defaults, paths, run_files
from zhlm.errors import NotFound, UserError
from zhlm.finetune import batching, kinds, packing, saved, task_files
from zhlm.finetune.readers.base import input_fields
from zhlm.models import model_config
from zhlm.train import checkpoint
from zhlm.train.checkpoint import VOCAB


class TaskModel:
    """A fine-tuned model ready to predict: ``TaskModel.load(workdir).predict(examples)``."""

    def __init__(self, kind, model, params, config, tokenizer, settings: str = ""):
        self.kind, self.config, self.tokenizer = kind, config, tokenizer
        # "length 128 (the fine-tuning run's), batch 32 (...)": what predicting uses, and why
        self.settings = settings or describe_settings(config, "the run's", "the run's")
        self.tally = Tally()
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
        cls,
        source: str,
        fmt: str = "",
        text_fields=(),
        kind: str = "",
        max_seq_length: int = 0,
        batch_size: int = 0,
        pack: bool = True,
    ) -> TaskModel:
        """The model of ``source``, a fine-tuning workdir, its ``best/`` or a Hugging Face
        task folder (:func:`from_hf`; ``kind`` picks among kinds of one class); ``fmt`` and
        ``text_fields`` say how inputs are read when not as the run's data was;
        ``max_seq_length`` and ``batch_size`` (0: the run's, :func:`fit_lengths`) how long
        each input is cut and how many are computed at once; ``pack`` False predicts in length
        buckets, one example a row (``task.pack``)."""
        best = run_files.finetuned_params(source)
        if best:
            model, params, config = saved.load_finetuned(best)
            found = kinds.get(config.task.kind)
            why = ("the fine-tuning run's", "the fine-tuning run's")
        elif (hf_config := _hf_config(source)) is not None:
            found, model, params, config = from_hf(source, kind)
            why = (_hf_length_origin(hf_config, config), "the default")
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
        length_why = fit_lengths(config, max_seq_length, batch_size)
        settings = describe_settings(
            config, length_why or why[0], "asked" if batch_size else why[1]
        )
        return cls(found, model, params, config, task_files.load_tokenizer(task), settings)

    def predict(self, examples) -> list[dict]:
        """One record per example (see the module docstring), in the examples' order; what
        was computed is added to :attr:`tally`."""
        return _records(
            self.kind, self.task, examples, self.tokenizer, self._forward, self.config, self.tally
        )


def fit_lengths(config, max_seq_length: int = 0, batch_size: int = 0) -> str:
    """Sets ``config``'s prediction length and batch when given (0: keep the run's); returns
    why the length is what it is ("" when kept). A length above the model's position table, or
    not a positive number, is refused; the run's length buckets are cut to the new length."""
    task, table = config.task, config.model.max_position_embeddings
    if batch_size < 0 or batch_size != int(batch_size):
        raise UserError(f"batch_size={batch_size}: give a positive number of inputs per batch")
    if batch_size:
        config.train.batch_size = int(batch_size)
    if not max_seq_length:
        return ""
    if max_seq_length < 2 or max_seq_length != int(max_seq_length):
        raise UserError(
            f"max_seq_length={max_seq_length}: give a number of tokens from 2 ([CLS] and "
            f"[SEP]) to the model's {table} positions"
        )
    if max_seq_length > table:
        raise UserError(
            f"max_seq_length={max_seq_length} is above the model's position table ({table} "
            f"rows): give {table} or less"
        )
    task.max_seq_length = int(max_seq_length)
    if task.length_buckets:  # the run's own lengths, those below the new one kept
        kept = [n for n in task.length_buckets if n < task.max_seq_length]
        task.length_buckets = (*kept, task.max_seq_length)
    return "asked"


def describe_settings(config, length_why: str, batch_why: str) -> str:
    """``length 128 (the fine-tuning run's), batch 32 (asked)``."""
    return (
        f"length {config.task.max_seq_length} ({length_why}), "
        f"batch {config.train.batch_size} ({batch_why})"
    )


def _hf_length_origin(hf_config: dict, config) -> str:
    """Why a Hugging Face folder predicts at its length: its fine-tuning run's, which a zhlm
    export keeps, else its position table's, up to 512."""
    if "max_seq_length" in (hf_config.get(kinds.TASK_KEY) or {}):
        return "the fine-tuning run's, in the folder's config.json"
    table = config.model.max_position_embeddings
    return "the folder's position table" + (" up to 512" if table > 512 else "")


@dataclasses.dataclass
class Tally:
    """What predictions computed so far: inputs, real tokens and the token positions the
    batches held (filled batches included: packed rows, or each bucket at its length), and
    the rows of the last packed batch (0: not packed)."""

    examples: int = 0
    real_tokens: int = 0
    computed_positions: int = 0
    packed_rows: int = 0

    def add(self, examples: int, kind, task, arrays: dict, batch_size: int) -> None:
        """Counts ``examples`` inputs featurized as ``arrays`` and the pass over them that
        :func:`zhlm.finetune.packing.forward_all` runs."""
        self.examples += examples
        self.real_tokens += int(np.sum(np.asarray(arrays["attention_mask"]) > 0))
        if packing.packs(kind, task):
            positions, self.packed_rows = packing.computed_positions(arrays, batch_size)
            self.computed_positions += positions
            return
        buckets = batching.Buckets.of(arrays, task.length_buckets)
        self.computed_positions += buckets.computed_positions(batch_size)

    @property
    def real_token_share(self) -> float:
        return self.real_tokens / self.computed_positions if self.computed_positions else 0.0

    def since(self, before: Tally) -> Tally:
        """What was computed after ``before`` (a copy of this tally taken then)."""
        return Tally(
            self.examples - before.examples,
            self.real_tokens - before.real_tokens,
            self.computed_positions - before.computed_positions,
            self.packed_rows,
        )

    def describe(self, noun: str, seconds: float, compiles) -> str:
        """``3 inputs in 0.21 s (14 examples/s), 1 program compiled in 0.2 s, real tokens 75%
        of the positions computed, packed 2 rows a batch``: ``noun`` names the examples,
        ``compiles`` a :class:`zhlm.compilation_cache.CompileCount`."""
        rate = self.examples / seconds if seconds > 0 else 0.0
        packed = f", packed {self.packed_rows} rows a batch" if self.packed_rows else ""
        return (
            f"{self.examples} {noun} in {seconds:.2f} s ({rate:,.0f} examples/s), "
            f"{compiles.describe()}, real tokens {self.real_token_share:.0%} of the positions "
            f"computed{packed}"
        )


def from_hf(source: str, kind_name: str = ""):
    """``(kind, model, params, config)`` of a Hugging Face task folder
    (``BertForSequenceClassification`` and the others a kind exports): the kind from its
    architecture and config (``kinds.for_hf``), its labels from ``id2label``, the encoder and the
    trained head from its weights, the vocabulary from its ``vocab.txt`` or ``tokenizer.json``. A
    folder without the head's weights is refused (its head would be random)."""
    hf_config = _hf_config(source)
    kind = kinds.for_hf(hf_config, kind_name)
    loaded = checkpoint.load(source, fresh_heads=False)  # a task folder has no use for them
    config = defaults.get_finetune_config()
    checkpoint.adopt_model(config, loaded.config.model)
    task = config.task
    task.kind, task.format, task.vocab = kind.name, kind.formats[0], loaded.vocab
    task.max_seq_length = min(512, config.model.max_position_embeddings)
    kind.export.task_from(task, hf_config)
    model = kind.model(model_config(config.model), task)
    # The folder's weights fill the model: shapes suffice, and the initialiser (seconds to
    # compile) runs only for a part the folder lacks.
    shapes = saved.param_shapes(model, kind.example_inputs(task))
    params, left_fresh = saved.merge(shapes, loaded.with_task_heads(), kind.export.head)
    if kind.export.head in left_fresh:
        raise UserError(
            f"{source}: no trained {kind.export.head!r} of {kind.name} in its weights (a random "
            "head predicts nothing): fine-tune it with zhlm-finetune --init=FOLDER first"
        )
    if left_fresh:
        fresh = saved.init_params(model, jax.random.key(0), kind.example_inputs(task))
        params = dict(params, **{part: fresh[part] for part in left_fresh})
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


def _records(kind, task, examples, tokenizer, forward, config, tally=None) -> list[dict]:
    """The task kind's records (``zhlm.finetune.kinds``) of ``examples``, in their order;
    what was computed is added to ``tally``."""
    features = kind.featurize(examples, tokenizer, task, training=False)
    if tally is not None:
        tally.add(len(examples), kind, task, features.arrays, config.train.batch_size)
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
