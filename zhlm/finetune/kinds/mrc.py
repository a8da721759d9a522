"""Span-extraction MRC as in BERT's ``run_squad.py``: windows in, answers out.

Each example becomes ``[CLS] question [SEP] window [SEP]`` rows, with the question cut to
``max_query_length`` tokens and the context cut into windows that start ``doc_stride`` tokens
apart. A window that holds the whole answer is labelled with its token span; the others point at
``[CLS]`` (position 0). Tokens carry their character span in the context, so a predicted token
span is cut straight out of the original text, whatever the tokenizer normalised. Of the windows
that share a token, the one giving it the most context on both sides is the only one whose spans
may start there (BERT's "max context"). Scored with the official CMRC 2018 metric
(:mod:`zhlm.finetune.metrics.cmrc2018`).

The model is ``BertForQuestionAnswering``'s (a Dense(2) on every token, no dropout) and the loss
the mean of the start and end cross-entropies over the real tokens. Training keeps only the
questions whose answer was located in the context; a holdout keeps each passage on one side.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from zhlm import paths
from zhlm.convert import layout
from zhlm.errors import UserError
from zhlm.finetune.kinds.base import Export, TaskKind, cross_entropy
from zhlm.finetune.kinds.windows import doc_windows, max_context_window, special_ids
from zhlm.finetune.metrics import cmrc2018
from zhlm.finetune.readers import squad
from zhlm.finetune.readers.base import Reader
from zhlm.models import Model
from zhlm.models.layers import dense
from zhlm.run_files import EVAL_SET, PREDICTIONS


@dataclasses.dataclass
class MrcFeatures:
    """One row per window. ``arrays`` go to the device (``start_position``/``end_position`` [F]
    are the labels); the rest stays on the host to turn logits back into text."""

    arrays: dict[str, np.ndarray]
    example_index: np.ndarray  # [F] the example (question) each window belongs to
    window_start: np.ndarray  # [F] first context token of the window
    char_start: np.ndarray  # [F,S] first context character of each token; -1 outside the context
    char_end: np.ndarray  # [F,S] one past its last character; -1 outside the context
    max_context: np.ndarray  # [F,S] this window gives the token its most context (BERT)


def answer_token_span(starts: np.ndarray, ends: np.ndarray, char_start: int, length: int):
    """First and last token overlapping characters ``[char_start, char_start + length)``, or
    None when no token does (an answer of only whitespace or control characters)."""
    inside = np.flatnonzero((ends > char_start) & (starts < char_start + length))
    return (int(inside[0]), int(inside[-1])) if len(inside) else None


def mrc_features(
    examples: Sequence[squad.MrcExample],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
) -> MrcFeatures:
    """Windows of every example; see the module docstring. Labels come from the first located
    answer; an example without one is labelled ``[CLS]`` in every window (callers that train
    leave such examples out)."""
    questions = tokenizer.encode_batch([e.question for e in examples])
    contexts = tokenizer.encode_batch([e.context for e in examples])
    rows = []
    for index, (example, q, c) in enumerate(zip(examples, questions, contexts, strict=True)):
        q_ids = q.ids[:max_query_length]
        room = max_seq_length - len(q_ids) - 3
        if room <= 0:
            raise UserError(
                f"max_seq_length={max_seq_length} leaves no room for the context: raise "
                "config.task.max_seq_length or lower config.task.max_query_length"
            )
        spans = doc_windows(len(c.ids), room, doc_stride)
        best = max_context_window(spans, len(c.ids))
        target = None
        if example.located_answers:
            answer = example.located_answers[0]
            target = answer_token_span(c.starts, c.ends, answer.start, len(answer.text))
        for w, span in enumerate(spans):
            row = _window(tokenizer, q_ids, c, span, best == w, target, max_seq_length)
            rows.append(dict(row, example_index=index, window_start=span[0]))
    if not rows:
        raise ValueError("no MRC examples to featurize")
    stacked = {key: np.stack([r[key] for r in rows]) for key in _WINDOW_KEYS}
    return MrcFeatures(
        arrays={k: stacked[k] for k in _WINDOW_KEYS[:5]},
        example_index=stacked["example_index"].astype(np.int32),
        window_start=stacked["window_start"].astype(np.int32),
        char_start=stacked["char_start"],
        char_end=stacked["char_end"],
        max_context=stacked["max_context"].astype(bool),
    )


_WINDOW_KEYS = (
    "input_ids",
    "token_type_ids",
    "attention_mask",
    "start_position",
    "end_position",
    "example_index",
    "window_start",
    "char_start",
    "char_end",
    "max_context",
)


def _window(tokenizer, q_ids, context, span, is_best, target, max_seq_length) -> dict:
    """The arrays of one window ``[CLS] question [SEP] context[span] [SEP]``; ``is_best`` [T]
    marks the context tokens whose max-context window this is, ``target`` the answer's token
    span in the whole context (or None)."""
    cls, sep, pad = special_ids(tokenizer)
    start, length = span
    offset = len(q_ids) + 2
    tokens = [cls, *q_ids, sep, *context.ids[start : start + length], sep]
    row = dict(
        input_ids=np.full(max_seq_length, pad, np.int32),
        token_type_ids=np.zeros(max_seq_length, np.int32),
        attention_mask=np.zeros(max_seq_length, np.int32),
        char_start=np.full(max_seq_length, -1, np.int32),
        char_end=np.full(max_seq_length, -1, np.int32),
        max_context=np.zeros(max_seq_length, np.int32),
    )
    row["input_ids"][: len(tokens)] = tokens
    row["token_type_ids"][offset : len(tokens)] = 1
    row["attention_mask"][: len(tokens)] = 1
    inside = slice(offset, offset + length)
    row["char_start"][inside] = context.starts[start : start + length]
    row["char_end"][inside] = context.ends[start : start + length]
    row["max_context"][inside] = is_best[start : start + length]
    first = last = 0
    if target is not None and start <= target[0] and target[1] < start + length:
        first, last = target[0] - start + offset, target[1] - start + offset
    row["start_position"], row["end_position"] = np.int32(first), np.int32(last)
    return row


# ------------------------------------------------------------------------------ MRC answers


def best_spans(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    start_ok: np.ndarray,
    end_ok: np.ndarray,
    n_best_size: int,
    max_answer_length: int,
) -> list[tuple[float, int, int]]:
    """The ``n_best_size`` best ``(start + end logit, start, end)`` spans of one window, best
    first: starts among the ``n_best_size`` highest allowed start logits, ends likewise, with
    ``start <= end < start + max_answer_length``. ``start_ok``/``end_ok`` say where a span may
    start and end (context tokens; never the question, [CLS] or [SEP])."""
    starts = _top(np.where(start_ok, start_logits, -np.inf), n_best_size)
    ends = _top(np.where(end_ok, end_logits, -np.inf), n_best_size)
    i, j = np.meshgrid(starts, ends, indexing="ij")
    keep = (j >= i) & (j < i + max_answer_length)
    i, j = i[keep], j[keep]
    scores = start_logits[i] + end_logits[j]
    order = np.argsort(-scores, kind="stable")[:n_best_size]
    return [(float(scores[k]), int(i[k]), int(j[k])) for k in order]


def _top(logits: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` highest finite entries, highest first."""
    order = np.argsort(-logits, kind="stable")[:n]
    return order[np.isfinite(logits[order])]


def best_answers(
    features: MrcFeatures,
    examples: Sequence[squad.MrcExample],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int,
    max_answer_length: int,
) -> dict[str, tuple[str, float]]:
    """``{qid: (answer, start + end logit)}``: the best span over all windows of each question,
    cut out of its original context; ``("", -inf)`` where no window allows a span."""
    best: dict[int, tuple[float, int, int, int]] = {}
    for f, example in enumerate(features.example_index):
        context = features.char_start[f] >= 0
        spans = best_spans(
            start_logits[f],
            end_logits[f],
            context & features.max_context[f],
            context,
            n_best_size,
            max_answer_length,
        )
        if spans and (example not in best or spans[0][0] > best[example][0]):
            best[example] = (*spans[0], f)
    answers = {}
    for index, example in enumerate(examples):
        if index not in best:
            answers[example.qid] = ("", float("-inf"))
            continue
        score, i, j, f = best[index]
        text = example.context[features.char_start[f, i] : features.char_end[f, j]]
        answers[example.qid] = (text, float(score))
    return answers


def predict_answers(*args) -> dict[str, str]:
    """``{qid: answer}`` of :func:`best_answers` (what the CMRC metric scores)."""
    return {qid: text for qid, (text, _) in best_answers(*args).items()}


def mrc_score(examples: Sequence[squad.MrcExample], predictions: dict) -> cmrc2018.CmrcScore:
    """The official CMRC 2018 F1/EM of ``predictions`` against every answer of ``examples``."""
    references = [(e.qid, [a.text for a in e.answers]) for e in examples]
    return cmrc2018.evaluate(references, predictions)


# -------------------------------------------------------------------------------- the kind


class SpanExtractor(Model):
    """``{"start_logits", "end_logits"}`` [B,S] for span-extraction MRC. Raw scores: padding and
    question tokens are excluded by the loss and by the span search, not here."""

    def setup(self):
        super().setup()
        self.qa_outputs = dense(self.config, 2, ("embed", "norm"), None)

    def __call__(self, input_ids, token_type_ids, attention_mask, deterministic=True):
        x = self.encode(input_ids, token_type_ids, attention_mask, deterministic)
        logits = self.qa_outputs(x).astype(jnp.float32)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


@dataclasses.dataclass(frozen=True)
class Mrc(TaskKind):
    name: str = "mrc"
    metric: str = "f1"
    reader: Reader = squad.SquadReader()
    export: Export = Export("ForQuestionAnswering", layout.QA_OUTPUTS)

    def holdout(self, example):
        return _passage(example), None

    def training_examples(self, task, train):
        """The questions whose answer was located in their context: the others have no span to
        learn (they still count in the dev score, against their answer texts)."""
        located = [e for e in train if e.located_answers]
        if len(located) < len(train):
            print(
                f"zhlm-finetune: {len(train) - len(located)} of {len(train)} training questions "
                "left out of training: none of their answers is in their context "
                "(answer_not_found above); dev questions like them still count in the score",
                flush=True,
            )
        if not located:
            raise UserError(
                f"{task.train_file}: no training question has an answer located in its context: "
                "check answer_start and the answer texts"
            )
        return located

    def featurize(self, examples, tokenizer, task, training):
        args = (tokenizer, task.max_seq_length, task.doc_stride, task.max_query_length)
        return mrc_features(examples, *args)

    def model(self, cfg, task):
        return SpanExtractor(cfg)

    def loss(self, outputs, batch):
        """Mean of the start and end cross-entropies over the real tokens of each window."""
        real = batch["attention_mask"] > 0

        def over_real_tokens(logits, target):
            logits = jnp.where(real, logits, -1e9)
            return cross_entropy(logits, target)

        start = over_real_tokens(outputs["start_logits"], batch["start_position"])
        loss = (start + over_real_tokens(outputs["end_logits"], batch["end_position"])) / 2
        return loss, jnp.ones_like(loss)

    def decode(self, features, outputs, examples, task):
        """``{qid: (answer, score)}`` (see :func:`best_answers`)."""
        return best_answers(
            features, examples, outputs["start_logits"], outputs["end_logits"],
            task.n_best_size, task.max_answer_length,
        )  # fmt: skip

    def score(self, features, examples, predictions):
        score = mrc_score(examples, _texts(predictions))
        return {"f1": score.f1, "em": score.em, "average": score.average}

    def records(self, examples, predictions, task):
        return [
            dict(id=qid, answer=text, **({"score": score} if text else {}))
            for qid, (text, score) in predictions.items()
        ]

    def write_dev(self, root, examples, predictions):
        written = {"predictions": str(root / PREDICTIONS), "eval_set": str(root / EVAL_SET)}
        paths.write_json(written["predictions"], _texts(predictions))
        paths.write_json(written["eval_set"], squad_json(examples))
        return written


def _texts(answers: dict) -> dict[str, str]:
    return {qid: text for qid, (text, _) in answers.items()}


def _passage(example: squad.MrcExample):
    return (example.title, example.context_id, example.context)


def squad_json(examples: Sequence[squad.MrcExample]) -> dict:
    """SQuAD v1 layout of ``examples`` (one paragraph per passage), the dataset file that
    ``zhlm-cmrc-eval`` scores a predictions file against."""
    paragraphs: dict = {}
    for e in examples:
        para = paragraphs.setdefault(_passage(e), {"id": e.context_id, "context": e.context})
        answers = [
            {"text": a.text, "answer_start": -1 if a.start is None else a.start} for a in e.answers
        ]
        para.setdefault("qas", []).append({"id": e.qid, "question": e.question, "answers": answers})
    data = [{"title": key[0], "paragraphs": [para]} for key, para in paragraphs.items()]
    return {"version": "v1.0", "data": data}
