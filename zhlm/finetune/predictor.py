"""``zhlm.Predictor``: a fine-tuned model loaded once, predicting Python objects in memory.

  predictor = zhlm.pipeline("/tmp/cs")      # a zhlm-finetune workdir, its best/, an HF folder
  predictor("酒店很干净，服务也好")            # {"text": ..., "label": "1", "probabilities": {...}}
  predictor(["很好", "太差了"])               # a list gives a list of results, in its order
  zhlm.pipeline("/tmp/qm")([("几点了", "现在几点")])          # pairs
  zhlm.pipeline("/tmp/cmrc")({"question": q, "context": c})  # records by field name

Why a layer over :class:`~zhlm.finetune.task_model.TaskModel`: it turns Python objects into the
task kind's examples and nothing else, so that a result is what ``zhlm-predict`` writes for the
same input in a file (the same featurize, forward pass, decode and records). An input is a
record of the kind's input fields (:attr:`Predictor.inputs`: ``text``; ``text_a, text_b``;
``question, context``): a ``str`` is the one input of a single-text kind, a ``tuple`` the
inputs in that order, a ``dict`` names them (and may give an ``id``). The kind builds the
examples (``Reader.examples_from``). Each result holds its input fields and the prediction
(``label`` and ``probabilities``; ``answer`` and ``score``; ``entities``), and the ``id`` where
the input gave one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from absl import logging

from zhlm.compilation_cache import CompileCount
from zhlm.errors import UserError
from zhlm.finetune.readers.base import required_fields
from zhlm.finetune.task_model import TaskModel

CHUNK = 1024  # examples featurized at a time, so that a long list needs no more memory


class Predictor:
    """A fine-tuned model of ``source`` (a zhlm-finetune workdir, its ``best/`` or a Hugging
    Face task folder such as ``BertForSequenceClassification``'s: ``TaskModel.load``), loaded once;
    ``predictor(inputs)`` or ``predictor.predict(inputs)`` predicts (see the module docstring).
    ``max_seq_length`` and ``batch_size`` (0: the run's, ``TaskModel.load``) set how long each
    input is cut and how many are computed at once; the log (absl, INFO) says which it uses and
    why, and after each call :attr:`summary` what it computed. ``pack=False`` computes one
    example a row (length buckets) instead of several (:mod:`zhlm.finetune.packing`), for the
    same results up to float rounding."""

    def __init__(
        self,
        source: str,
        kind: str = "",
        max_seq_length: int = 0,
        batch_size: int = 0,
        pack: bool = True,
    ):
        self.model = TaskModel.load(
            source, kind=kind, max_seq_length=max_seq_length, batch_size=batch_size, pack=pack
        )
        logging.info("zhlm.Predictor %s: %s", source, self.model.settings)
        self.summary = ""  # the last prediction's: inputs, examples/s, compiles, real tokens

    @property
    def settings(self) -> str:
        """The length and batch it predicts with, and why: ``length 128 (asked), batch 32
        (the fine-tuning run's)``."""
        return self.model.settings

    @property
    def task(self):
        """The run's ``config.task``: kind, labels and the featurization options."""
        return self.model.task

    @property
    def inputs(self) -> tuple[str, ...]:
        """The input fields of an example, in the order a tuple gives them."""
        return required_fields(self.model.kind.reader.example_type)[1:]

    def predict(self, inputs):
        """One result for a ``str``, ``tuple`` or ``dict``; a list of results, in order, for a
        list (or any other iterable) of them."""
        single = isinstance(inputs, (str, tuple, dict))
        if not single and not isinstance(inputs, Iterable):
            raise TypeError(f"a {type(inputs).__name__} to predict; {self._expected()}")
        records = [self._record(i, x) for i, x in enumerate([inputs] if single else inputs)]
        examples = self.model.kind.reader.examples_from(records, self.task)
        results = []
        began, before = time.perf_counter(), dataclasses.replace(self.model.tally)
        with CompileCount() as compiles:
            for start in range(0, len(examples), CHUNK):
                results += self.model.predict(examples[start : start + CHUNK])
        seconds = time.perf_counter() - began
        self.summary = self.model.tally.since(before).describe("inputs", seconds, compiles)
        logging.info("zhlm.Predictor: %s", self.summary)
        for record, result in zip(records, results, strict=True):
            if "id" not in record:
                del result["id"]  # the position, which the caller already knows
        return results[0] if single else results

    __call__ = predict

    def _record(self, index: int, item) -> dict:
        names = self.inputs
        if isinstance(item, dict):
            return item
        if isinstance(item, str) and len(names) == 1:
            return {names[0]: item}
        if isinstance(item, tuple) and len(item) == len(names):
            return dict(zip(names, item, strict=True))
        size = f" of {len(item)}" if isinstance(item, tuple) else ""
        raise UserError(f"input {index} is a {type(item).__name__}{size}; {self._expected()}")

    def _expected(self) -> str:
        names = self.inputs
        one = f"a tuple ({', '.join(names)})" if len(names) > 1 else f"a str (its {names[0]})"
        fields = ", ".join(f'"{name}": ...' for name in names)
        return f"kind {self.task.kind} predicts {one} or a dict {{{fields}}}, or a list of them"


def pipeline(
    source: str, kind: str = "", max_seq_length: int = 0, batch_size: int = 0, pack: bool = True
) -> Predictor:
    """:class:`Predictor` of ``source``, in the spirit of ``transformers.pipeline``; ``kind``
    picks the task kind of a Hugging Face folder whose class several share (``pair``);
    ``max_seq_length``, ``batch_size`` and ``pack`` as :class:`Predictor`'s."""
    return Predictor(source, kind, max_seq_length, batch_size, pack)
