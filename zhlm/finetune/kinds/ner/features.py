"""NER features: characters to fixed ``[N, max_seq_length]`` windows, and predictions back.

Tokens: WordPiece keeps a run of Latin letters or digits as one word (``NBA``, ``2006``) and may
cut it into pieces. The label of a word is the tag of its first character and goes on its first
piece; the other pieces are ignored in the loss (``labels`` -1, :data:`IGNORE`). On merge the
word's predicted tag goes to its first character and the entity continues over the rest (``I-X``,
or ``O``). In MSRA dev two of 4,240 entities end or start inside such a word (stock codes like
``A12``, ``992XR``), so even perfect token predictions give F1 99.95 there (test: 100).

Characters the tokenizer drops (spaces, control and zero-width characters) get no token. On merge
such a character takes ``I-X`` when the characters around it are predicted as one entity of type
X (the next covered one is ``I-X``), else ``O``: a space inside ``Bill Gates`` stays in the entity,
one between two entities or at an edge does not, so the model's own boundary decides and a gold
entity with a space inside can still be matched exactly.

Windows: a sentence whose tokens do not fit in ``max_seq_length - 2`` is cut into windows that
start ``stride`` tokens apart, the last ending at the last token, so together they cover every
token. Of the windows holding a word's first piece, the one giving it the most context on both
sides (BERT's max-context rule, as MRC: :func:`zhlm.finetune.kinds.windows.max_context_window`)
gives its prediction; the others still train on it.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Sequence

import numpy as np

from zhlm.errors import UserError
from zhlm.finetune.kinds.windows import doc_windows, max_context_window, special_ids
from zhlm.finetune.metrics import conlleval
from zhlm.finetune.readers.ner import NerExample

log = logging.getLogger(__name__)
IGNORE = -1  # the label of positions without one: [CLS], [SEP], padding, non-first pieces


@dataclasses.dataclass
class NerFeatures:
    """One row per window. ``arrays`` go to the device; the rest stays on the host so that
    :func:`merge` can turn per-token predictions into per-character tags."""

    arrays: dict[str, np.ndarray]  # input_ids, token_type_ids, attention_mask, labels: [F,S]
    label_names: tuple[str, ...]  # label id -> BIO tag
    example_index: np.ndarray  # [F] the example each window belongs to
    window_start: np.ndarray  # [F] the window's first token among its sentence's tokens
    char_start: np.ndarray  # [F,S] first character of the word a first piece labels; else -1
    char_end: np.ndarray  # [F,S] one past that word's last character; -1 elsewhere
    max_context: np.ndarray  # [F,S] this window's prediction is the one merge uses
    num_chars: np.ndarray  # [E] characters of each example


def task_stride(task) -> int:
    """The stride a task config asks for: ``task.doc_stride``, at most the window (a longer
    one would leave gaps; MRC's windows cap it the same way)."""
    return min(task.doc_stride, task.max_seq_length - 2)


def ner_features(
    examples: Sequence[NerExample],
    tokenizer,
    labels: Sequence[str],
    max_seq_length: int,
    stride: int,
    unknown_tags: str = "raise",
) -> NerFeatures:
    """``[CLS] window [SEP]`` rows of every example (see the module docstring); ``labels`` are
    the BIO tags in the order of the classifier outputs. ``token_type_ids`` are all 0.

    A tag outside ``labels`` (an entity type the training file lacks) is an error with
    ``unknown_tags="raise"`` (training data); with ``"ignore"`` (evaluation, prediction) its
    words get no label in the loss, counted in a warning, and the entity still counts in the
    metric, which reads the examples' own tags."""
    if unknown_tags not in ("raise", "ignore"):
        raise ValueError(f"unknown_tags={unknown_tags!r}: raise or ignore")
    label_index = _label_index(labels)
    ignored = collections.Counter()
    window = max_seq_length - 2
    if window < 1 or not 1 <= stride <= window:
        raise UserError(
            f"need 1 <= stride={stride} <= max_seq_length - 2 = {window}: pass a "
            "--config.task.doc_stride in that range"
        )
    continuation = _continuation_ids(tokenizer)
    rows = []
    encodings = tokenizer.encode_batch([e.text for e in examples])
    for index, (example, encoding) in enumerate(zip(examples, encodings, strict=True)):
        words = _words(encoding, continuation)
        tag_ids = _tag_ids(example, words[1], label_index, unknown_tags, ignored)
        spans = doc_windows(len(encoding.ids), window, stride)
        best = max_context_window(spans, len(encoding.ids))
        for w, span in enumerate(spans):
            row = _row(tokenizer, encoding.ids, words, tag_ids, best == w, span, max_seq_length)
            rows.append(dict(row, example_index=index, window_start=span[0]))
    if not rows:
        raise ValueError("no NER examples to featurize")
    if ignored:
        shown = ", ".join(f"{tag} ({n})" for tag, n in sorted(ignored.items()))
        log.warning("NER tags outside the labels, left out of the loss: %s", shown)
    stacked = {key: np.stack([r[key] for r in rows]) for key in rows[0]}
    device_keys = ("input_ids", "token_type_ids", "attention_mask", "labels")
    return NerFeatures(
        arrays={k: stacked[k] for k in device_keys},
        label_names=tuple(labels),
        example_index=stacked["example_index"].astype(np.int32),
        window_start=stacked["window_start"].astype(np.int32),
        char_start=stacked["char_start"],
        char_end=stacked["char_end"],
        max_context=stacked["max_context"],
        num_chars=np.array([len(e.text) for e in examples], np.int32),
    )


def _label_index(labels: Sequence[str]) -> dict[str, int]:
    for tag in labels:
        if tag != "O" and conlleval.parse_tag(tag)[0] not in "BI":
            raise UserError(f"label {tag!r}: labels are BIO tags (O, B-X, I-X)")
    if len(set(labels)) != len(labels):
        raise UserError(f"labels {list(labels)} repeat a tag")
    return {tag: i for i, tag in enumerate(labels)}


def _continuation_ids(tokenizer) -> np.ndarray:
    """[V] whether a token id is a ``##`` piece, i.e. continues the word before it (WordPiece;
    a sentencepiece vocab has none, so each of its pieces counts as a word)."""
    return np.array(
        [tokenizer.id_to_token(i).startswith("##") for i in range(tokenizer.vocab_size)], bool
    )


def _words(encoding, continuation: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first, word_start, word_end)``: [T] whether each token is its word's first piece, and
    [W] the character span of each word. A token that starts inside the previous one's
    characters (one character normalised to several) also continues that word."""
    ids, starts, ends = encoding.ids, encoding.starts, encoding.ends
    first = ~continuation[ids]
    first[1:] &= starts[1:] >= ends[:-1]
    if len(ids):
        first[0] = True
    heads = np.flatnonzero(first)
    word_end = np.maximum.reduceat(ends, heads) if len(heads) else ends[:0]
    return first, starts[heads], word_end


def _tag_ids(example, word_start, label_index, unknown_tags, ignored) -> np.ndarray:
    """[W] the label id of each word: the tag of its first character (see :func:`ner_features`
    for a tag outside the labels)."""
    tags = [example.tags[c] for c in word_start]
    unknown = sorted(set(tags) - label_index.keys())
    if unknown and unknown_tags == "raise":
        raise UserError(
            f"{example.guid}: tags {unknown} are not in the labels (config.task.labels); pass "
            "--config.task.labels='()' to take the training file's own entity types"
        )
    ignored.update(t for t in tags if t not in label_index)
    return np.array([label_index.get(t, IGNORE) for t in tags], np.int32)


def _row(tokenizer, ids, words, tag_ids, is_best, span, max_seq_length) -> dict:
    """The arrays of one window ``[CLS] ids[span] [SEP]``; ``is_best`` [T] marks the tokens whose
    max-context window this is."""
    cls, sep, pad = special_ids(tokenizer)
    first, word_start, word_end = words
    start, length = span
    row = dict(
        input_ids=np.full(max_seq_length, pad, np.int32),
        token_type_ids=np.zeros(max_seq_length, np.int32),
        attention_mask=np.zeros(max_seq_length, np.int32),
        labels=np.full(max_seq_length, IGNORE, np.int32),
        char_start=np.full(max_seq_length, -1, np.int32),
        char_end=np.full(max_seq_length, -1, np.int32),
        max_context=np.zeros(max_seq_length, bool),
    )
    row["input_ids"][: length + 2] = [cls, *ids[start : start + length], sep]
    row["attention_mask"][: length + 2] = 1
    tokens = np.arange(start, start + length)[first[start : start + length]]
    word = np.cumsum(first)[tokens] - 1
    at = tokens - start + 1
    row["labels"][at] = tag_ids[word]
    row["char_start"][at], row["char_end"][at] = word_start[word], word_end[word]
    row["max_context"][at] = is_best[tokens]
    return row


# ------------------------------------------------------------------------------ predictions


def merge(features: NerFeatures, predictions: np.ndarray) -> list[list[str]]:
    """Per-example, per-character BIO tags from ``predictions``: logits [F,S,L] or label ids
    [F,S]. Each word takes its max-context window's prediction (module docstring)."""
    predictions = np.asarray(predictions)
    if predictions.ndim == 3:
        predictions = predictions.argmax(-1)
    if predictions.shape != features.char_start.shape:
        raise ValueError(f"predictions {predictions.shape}, features {features.char_start.shape}")
    tags: list[list] = [[None] * int(n) for n in features.num_chars]
    for f, p in zip(*np.nonzero(features.max_context), strict=True):
        tag = features.label_names[predictions[f, p]]
        start, end = features.char_start[f, p], features.char_end[f, p]
        sentence = tags[features.example_index[f]]
        sentence[start] = tag
        sentence[start + 1 : end] = [_inside(tag)] * (end - start - 1)
    return [_fill_dropped(sentence) for sentence in tags]


def _inside(tag: str) -> str:
    return "O" if tag == "O" else "I-" + tag[2:]


def _fill_dropped(tags: list) -> list[str]:
    """Tags for the characters no token covers (None): inside the entity around them when the
    next covered character continues it, else O."""
    i = 0
    while i < len(tags):
        if tags[i] is not None:
            i += 1
            continue
        j = i
        while j < len(tags) and tags[j] is None:
            j += 1
        before = tags[i - 1] if i else "O"
        after = tags[j] if j < len(tags) else "O"
        inside = before != "O" and after == _inside(before)
        tags[i:j] = [after if inside else "O"] * (j - i)
        i = j
    return tags
