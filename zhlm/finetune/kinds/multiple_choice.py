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

Formats (:mod:`zhlm.finetune.readers.choices`): ``c3``, C3's own JSON, and ``jsonl``, a
question a line.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from zhlm.convert import layout
from zhlm.errors import UserError
from zhlm.finetune.kinds.base import Export, Features, TaskKind, cross_entropy, softmax
from zhlm.finetune.kinds.windows import special_ids, truncate_pair
from zhlm.finetune.readers.base import Reader
from zhlm.finetune.readers.choices import ChoiceReader
from zhlm.models import Model
from zhlm.models.layers import dense

HF_NUM_CHOICES = 4  # options per question of a Hugging Face folder that does not say


@dataclasses.dataclass(frozen=True)
class ChoiceExport(Export):
    """A multiple-choice export: a folder that does not record how many options its questions
    have (one not written by zhlm) gets :data:`HF_NUM_CHOICES`, the most of C3 and of most
    benchmarks; the head scores any number, so inputs with fewer are padded."""

    def task_from(self, task, hf_config):
        super().task_from(task, hf_config)
        task.num_choices = task.num_choices or HF_NUM_CHOICES


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
    metric: str = "accuracy"
    reader: Reader = ChoiceReader()
    export: Export = ChoiceExport("ForMultipleChoice", layout.CLASSIFIER)

    def settle(self, task, train):
        if not task.num_choices:
            task.num_choices = max(len(e.options) for e in train)
            print(
                f"zhlm-finetune: {task.num_choices} options per question (the most in "
                f"{task.train_file})",
                flush=True,
            )

    def holdout(self, example):
        return example.passage_id, None

    def training_examples(self, task, train):
        if task.num_choices < 2:
            raise UserError(
                f"config.task.num_choices={task.num_choices}: a question needs two options or "
                "more (0: the most options of a training question)"
            )
        return train

    def featurize(self, examples, tokenizer, task, training):
        return Features(choice_features(examples, tokenizer, task.num_choices, task.max_seq_length))

    def example_inputs(self, task):
        shape = (1, task.num_choices, task.max_seq_length)
        return (jax.ShapeDtypeStruct(shape, jnp.int32),) * 3

    def model(self, cfg, task):
        return ChoiceScorer(cfg)

    def loss(self, outputs, batch):
        logits = _masked(outputs["logits"], batch["choice_mask"])
        ce = cross_entropy(logits, batch["label"])
        return ce, jnp.ones_like(ce)

    def device_outputs(self, outputs, batch):
        return {"logits": _masked(outputs["logits"], batch["choice_mask"])}

    def decode(self, features, outputs, examples, task):
        return outputs["logits"]  # [N, C], padded options at the float minimum

    def score(self, features, examples, predictions):
        gold = features.arrays["label"]
        right = np.argmax(predictions, -1) == gold
        return {"accuracy": 100 * float(np.mean(right)) if len(gold) else 0.0}

    def chance(self, arrays):
        # A uniform guess over each question's options: a run that learned nothing from its
        # inputs stays at its loss (the answer's position carries no signal).
        options = arrays["choice_mask"].sum(-1)
        return {
            "loss": float(np.mean(np.log(options))),
            "chance_rate": 100 * float(np.mean(1.0 / options)),
        }

    def records(self, examples, predictions, task):
        records = []
        for e, logits in zip(examples, predictions, strict=True):
            probs = softmax(logits[: len(e.options)])
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
            raise UserError(
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
