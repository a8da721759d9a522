"""Multiple choice: a passage (or none), a question and its options; one score per option.

Each option becomes one sequence ``[CLS] passage [SEP] option [SEP] question [SEP]`` (segment
ids 0 up to the first [SEP], 1 after), the layout of C3's released BERT baseline. Only the
passage is cut to fit ``max_seq_length`` (its end first), never the question or an option, as
CLUE's C3 baseline does; only an option and question longer than the whole sequence are cut
themselves (the longer first), and the passage then left out.

A question is one row of ``[C, S]`` arrays, ``C = task.num_choices``; questions with fewer
options are padded with copies of their first option, masked out of the loss and the decision
by ``choice_mask`` [N, C]. The model is ``BertForMultipleChoice``'s: the ``C`` sequences of a
row go through the encoder as ``[B*C, S]``, the pooled [CLS] (with dropout) through a Dense(1),
giving ``logits`` [B, C], and the loss is the cross-entropy of the softmax over the real
options.

Formats: ``c3``, C3's own JSON (``[[passage sentences], [{question, choice, answer}], id]``,
the answer given as the option's text), and ``jsonl``, a record a line with ``question``,
``options`` (a list), optionally ``passage`` and ``id``, and ``answer`` (the option's text or
its 0-based index). Several files (C3's dialogue and mixed-genre halves) are read as one
through ``task.train_file=a.json,b.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from zhlm.convert import layout
from zhlm.finetune import report as report_lib
from zhlm.finetune.encoding import special_ids, truncate_pair
from zhlm.finetune.kinds.base import Features, TaskKind
from zhlm.models import Model
from zhlm.models.layers import dense

UNKNOWN_ANSWER = "unknown_answer"  # an answer that is none of its question's options
TOO_MANY_OPTIONS = "too_many_options"  # more options than task.num_choices
HF_NUM_CHOICES = 4  # options per question of a model read from a Hugging Face folder


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    guid: str
    passage: str  # "" when the question stands alone
    question: str
    options: tuple[str, ...]
    label: int | None = None  # the answer's option index; None: unlabelled (inputs to predict)
    line: int | None = None
    passage_id: str = ""  # questions on one passage share it (a holdout keeps them together)


class ChoiceScorer(Model):
    """``{"logits": [B, C]}``: one score per option from its sequence's pooled [CLS]."""

    def setup(self):
        super().setup()
        self.dropout = nn.Dropout(self.config.dropout_rate)
        self.classifier = dense(self.config, 1, ("embed", "norm"), None)

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        rows, choices, length = input_ids.shape
        flat = [x.reshape(rows * choices, length) for x in (input_ids, token_type_ids)]
        x = self.encode(*flat, attention_mask.reshape(rows * choices, length), deterministic)
        pooled = self.dropout(self.pooler(x), deterministic)
        scores = self.classifier(pooled).astype(jnp.float32)
        return {"logits": scores.reshape(rows, choices)}


@dataclasses.dataclass(frozen=True)
class MultipleChoice(TaskKind):
    name: str = "multiple_choice"
    formats: tuple[str, ...] = ("c3", "jsonl")
    metric: str = "accuracy"
    head: str = layout.CLASSIFIER
    hf_class: str = "ForMultipleChoice"

    def read(self, path, task, require_label=True):
        reader = read_c3 if task.format == "c3" else read_jsonl
        examples, report = reader(path, require_label)
        return _limit_options(examples, report, task.num_choices)

    def describe_formats(self):
        return (
            "format c3 (C3's JSON: [[passage sentences], [{question, choice, answer}], id]) or "
            'jsonl (a record a line with "question", "options" and "answer")'
        )

    def example_type(self, task):
        return ChoiceExample

    def examples_from(self, records, task):
        """As the base's, with ``options`` a non-empty list of strings (kept as a tuple) and
        ``passage`` optional (a question may stand alone)."""
        passages = [r.get("passage") or "" if isinstance(r, dict) else "" for r in records]
        for index, passage in enumerate(passages):
            if not isinstance(passage, str):
                raise ValueError(f"input {index}: passage is {passage!r}; give a string")
        # The base checks the required fields; an absent passage must not fail it.
        stand_in = [dict(r, passage="-") if isinstance(r, dict) else r for r in records]
        examples = super().examples_from(stand_in, task)
        for index, e in enumerate(examples):
            options = e.options
            if (
                not isinstance(options, list | tuple)
                or not options
                or not all(isinstance(o, str) for o in options)
            ):
                raise ValueError(f"input {index}: options is {options!r}; give a list of strings")
        return [
            dataclasses.replace(e, passage=p, options=tuple(e.options))
            for e, p in zip(examples, passages, strict=True)
        ]

    def resolve(self, task, train):
        if not task.num_choices:
            task.num_choices = max(len(e.options) for e in train)
            print(
                f"zhlm-finetune: {task.num_choices} options per question (the most in "
                f"{task.train_file})",
                flush=True,
            )

    def check_split(self, task, train, evaluation):
        if task.num_choices < 2:
            raise ValueError(
                f"config.task.num_choices={task.num_choices}: a question needs two options or "
                "more (0: the most options of a training question)"
            )

    def group(self, example):
        return example.passage_id

    def featurize(self, examples, tokenizer, task, training):
        return Features(choice_features(examples, tokenizer, task.num_choices, task.max_seq_length))

    def example_inputs(self, task):
        shape = (1, task.num_choices, task.max_seq_length)
        return (jax.ShapeDtypeStruct(shape, jnp.int32),) * 3

    def model(self, cfg, task):
        return ChoiceScorer(cfg)

    def loss(self, outputs, batch):
        logits = _masked(outputs["logits"], batch["choice_mask"])
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"])
        return ce, jnp.ones_like(ce)

    def device_outputs(self, outputs, batch):
        return {"logits": _masked(outputs["logits"], batch["choice_mask"])}

    def decode(self, features, outputs, examples, task):
        return outputs["logits"]  # [N, C], padded options at the float minimum

    def score(self, features, examples, predictions):
        gold = features.arrays["label"]
        right = np.argmax(predictions, -1) == gold
        return {"accuracy": 100 * float(np.mean(right)) if len(gold) else 0.0}

    def prior(self, arrays):
        # The loss of a uniform guess over each question's options: a run that learned
        # nothing from its inputs stays there (the answer's position carries no signal).
        return float(np.mean(np.log(arrays["choice_mask"].sum(-1))))

    def baseline(self, arrays, task):
        return {"chance_rate": 100 * float(np.mean(1.0 / arrays["choice_mask"].sum(-1)))}

    def task_from_hf(self, task, hf_config):
        # A Hugging Face folder does not record how many options its questions have; the head
        # scores any number, so the inputs are padded to the most of C3 and most benchmarks.
        task.num_choices = HF_NUM_CHOICES

    def records(self, examples, predictions, task):
        records = []
        for e, logits in zip(examples, predictions, strict=True):
            probs = np.asarray(jax.nn.softmax(logits[: len(e.options)]))
            best = int(np.argmax(probs))
            records.append(
                dict(id=e.guid, answer=e.options[best], option=best, probabilities=probs.tolist())
            )
        return records


def _masked(logits, choice_mask):
    return jnp.where(choice_mask > 0, logits, jnp.finfo(logits.dtype).min)


def choice_features(examples, tokenizer, num_choices: int, max_seq_length: int) -> dict:
    """``input_ids, token_type_ids, attention_mask`` [N, C, S], ``choice_mask`` [N, C] (1: a
    real option) and ``label`` [N] (-1: none); see the module docstring for the layout."""
    cls, sep, pad = special_ids(tokenizer)
    n = len(examples)
    shape = (n, num_choices, max_seq_length)
    ids = np.full(shape, pad, np.int32)
    types, mask = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
    choice_mask = np.zeros((n, num_choices), np.int32)
    passages = tokenizer.encode_batch([e.passage for e in examples])
    questions = tokenizer.encode_batch([e.question for e in examples])
    options = tokenizer.encode_batch([o for e in examples for o in e.options])
    budget = max_seq_length - 4  # [CLS] and three [SEP]
    first = 0
    for row, e in enumerate(examples):
        if len(e.options) > num_choices:
            raise ValueError(
                f"{e.guid}: {len(e.options)} options, more than config.task.num_choices="
                f"{num_choices}"
            )
        question = questions[row].ids
        for c in range(num_choices):
            option = options[first + (c if c < len(e.options) else 0)].ids
            len_o, len_q = truncate_pair(len(option), len(question), budget)
            passage = passages[row].ids[: budget - len_o - len_q]
            head = [cls, *passage, sep]
            tokens = [*head, *option[:len_o], sep, *question[:len_q], sep]
            ids[row, c, : len(tokens)] = tokens
            types[row, c, len(head) : len(tokens)] = 1
            mask[row, c, : len(tokens)] = 1
        choice_mask[row, : len(e.options)] = 1
        first += len(e.options)
    label = np.array([-1 if e.label is None else e.label for e in examples], np.int32)
    return dict(
        input_ids=ids, token_type_ids=types, attention_mask=mask, choice_mask=choice_mask,
        label=label,
    )  # fmt: skip


# ------------------------------------------------------------------------------- reading


def _limit_options(examples, report, num_choices):
    """Questions with more options than ``num_choices`` (when set) are reported and left out:
    the head scores a fixed number of options."""
    if not num_choices:
        return examples, report
    kept = []
    for e in examples:
        if len(e.options) > num_choices:
            report.add(
                TOO_MANY_OPTIONS, e.line,
                f"{len(e.options)} options; config.task.num_choices={num_choices}",
            )  # fmt: skip
        else:
            kept.append(e)
    return report_lib.finish(kept, report)


def _example(report, line, guid, passage, question, options, answer, require_label, passage_id):
    """A :class:`ChoiceExample` from one record's fields, or None with the issue reported."""
    if not isinstance(question, str) or not isinstance(options, list) or not options:
        report.add(report_lib.MISSING_FIELD, line, "a question and a non-empty option list")
        return None
    if not all(isinstance(o, str) for o in options) or not isinstance(passage, str):
        report.add(report_lib.MALFORMED_LINE, line, "passage and options must be strings")
        return None
    label = None
    if answer is not None:
        if isinstance(answer, int) and not isinstance(answer, bool):
            label = answer if 0 <= answer < len(options) else None
        elif answer in options:
            label = options.index(answer)
        if label is None:
            report.add(UNKNOWN_ANSWER, line, f"answer {answer!r} is none of {options}")
            return None
    elif require_label:
        report.add(report_lib.MISSING_FIELD, line, "no answer")
        return None
    return ChoiceExample(guid, passage, question, tuple(options), label, line, passage_id)


def read_c3(path, require_label=True):
    """C3's JSON: a list of ``[passage sentences, questions, id]``; the questions of a passage
    get ids ``<id>-<n>`` (1-based) and share its passage (joined by newlines, as C3's
    baseline joins them)."""
    report = report_lib.ReadReport(os.fspath(path))
    raw = report_lib.read_utf8(path, report)
    if raw is None:
        return report_lib.finish([], report)
    decoder = report_lib.PositionDecoder(raw)
    try:
        data = decoder.decode(raw)
    except json.JSONDecodeError as error:
        report.add(report_lib.MALFORMED_LINE, error.lineno, report_lib.json_error(error))
        return report_lib.finish([], report)
    if not isinstance(data, list):
        report.add(report_lib.MISSING_FIELD, 1, "not a list of [passage, questions, id]")
        return report_lib.finish([], report)
    examples = []
    for number, item in enumerate(data, 1):
        ok = isinstance(item, list) and len(item) == 3 and isinstance(item[1], list)
        if not ok or not isinstance(item[0], list):
            report.add(
                report_lib.MALFORMED_LINE, None, f"item {number}: not [sentences, questions, id]"
            )
            continue
        passage_id = str(item[2])
        for n, qa in enumerate(item[1], 1):
            if not isinstance(qa, dict):
                report.add(
                    report_lib.MALFORMED_LINE, None, f"item {number}: a question is not an object"
                )
                continue
            example = _example(
                report, decoder.line(qa), f"{passage_id}-{n}", "\n".join(map(str, item[0])),
                qa.get("question"), qa.get("choice"), qa.get("answer"), require_label, passage_id,
            )  # fmt: skip
            if example is not None:
                examples.append(example)
    return report_lib.finish(examples, report)


def read_jsonl(path, require_label=True):
    """A record a line: ``question``, ``options``, optionally ``passage`` and ``id``, and
    ``answer`` (option text or 0-based index; optional when ``require_label`` is False)."""
    report = report_lib.ReadReport(os.fspath(path))
    examples = []
    for line, text in report_lib.lines(path, report):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            report.add(report_lib.MALFORMED_LINE, line, report_lib.json_error(error))
            continue
        if not isinstance(record, dict):
            report.add(report_lib.MALFORMED_LINE, line, "not a JSON object")
            continue
        guid = str(record.get("id", report_lib.guid(path, line)))
        passage = record.get("passage", "")
        example = _example(
            report, line, guid, passage, record.get("question"), record.get("options"),
            record.get("answer"), require_label, passage or guid,
        )  # fmt: skip
        if example is not None:
            examples.append(example)
    return report_lib.finish(examples, report)
