"""Selection units: which tokens a scheme masks together, as per-example boolean vectors.

Every scheme reduces to the same question, "which tokens form one unit?", so each scheme here only
builds a ``Units`` value for ONE example ([S] vectors; ``mask_batch`` vmaps it) and the budgeted
selection in ``select.py`` is shared. A unit is a run of candidate tokens that starts at a
``start`` mark and ends before the next mark or the next non-candidate token, so units are always
contiguous: the batch's ids only need to be equal within a unit and different from the neighbours'.

A scheme is ``fn(bits, ex, cfg) -> Units`` with ``bits`` uint32 [1, S] of its own randomness,
``ex`` the example's fields and ``cfg`` the ``config.masking`` block.

Batch fields read here (int32 [S] per example; -1 means "none"): ``word_ids`` (jieba word of each
token; -1 on [CLS], [SEP] and padding, which are never candidates), ``phrase_ids`` and
``entity_ids`` (ERNIE multi-word phrases and named entities; -1 outside one).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from zhlm.errors import UserError


class Units(NamedTuple):
    """One example's units. ``fallback`` units are ranked after all others (ERNIE priority)."""

    start: jax.Array  # bool [S]: first token of a unit
    cand: jax.Array  # bool [S]: token may be selected
    fallback: jax.Array  # bool [S]: token's unit only fills the budget left by the others
    extras: dict  # per-example diagnostics for tests (e.g. the ERNIE level), scalars or [S]


def _prev(x, fill):
    """``x`` shifted right by one: the value at the previous position (``fill`` at 0)."""
    return jnp.concatenate([jnp.full((1,), fill, x.dtype), x[:-1]])


def candidates(ex):
    """Real text tokens: [CLS]/[SEP]/padding carry word id -1 and attention 0 marks padding."""
    return (ex["word_ids"] >= 0) & (ex["attention_mask"] > 0)


def word_starts(ex, cand):
    """First token of each word; a word also restarts after any non-candidate gap."""
    w = ex["word_ids"]
    return cand & (~_prev(cand, False) | (w != _prev(w, -1)))


def uniform(bits):
    """uint32 random bits -> float32 uniform in [0, 1) (24 bits, exact in float32)."""
    return (bits >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def _units(start, cand, fallback=None, **extras):
    fallback = jnp.zeros_like(cand) if fallback is None else fallback
    return Units(start, cand, fallback & cand, extras)


def token_units(bits, ex, cfg):
    """BERT: every real token is its own unit."""
    del bits, cfg
    cand = candidates(ex)
    return _units(cand, cand)


def whole_word_units(bits, ex, cfg):
    """Chinese whole-word masking: the characters of one jieba word are one unit."""
    del bits, cfg
    cand = candidates(ex)
    return _units(word_starts(ex, cand), cand)


@functools.lru_cache(maxsize=64)
def _hazard(probs, seq_len):
    """Table H[a-1, r]: chance that a group of ``a`` words so far ends at this word when ``r``
    words of the segment follow, for group lengths ~ ``probs`` conditioned on tiling the segment.

    Why conditioned: cutting a plain renewal sequence at the segment end clips the last group of
    every segment, which drags the realised mean span length from 3.8 to about 3.6 words on
    128-token pairs. Conditioning on an exact tiling (the Doob transform with the renewal
    probabilities u) keeps every group's length ~ P(n) except in segments of a few words.
    """
    f = np.asarray(probs, np.float64) / np.sum(probs)
    k = len(f)
    u = np.zeros(seq_len + k + 1)
    u[0] = 1.0
    for m in range(1, len(u)):
        n = np.arange(1, min(k, m) + 1)
        u[m] = np.sum(f[n - 1] * u[m - n])
    h = np.ones((k, seq_len))
    for a in range(1, k + 1):
        for r in range(seq_len):
            n = np.arange(a, k + 1)
            den = np.sum(f[n - 1] * u[r + a - n])
            h[a - 1, r] = f[a - 1] * u[r] / den if den > 0 else 1.0
    return h.astype(np.float32)


def _group_starts(v, ws, cand, probs):
    """Cuts each segment's words into consecutive groups of n words, n ~ ``probs`` (n = 1..K).

    A Markov chain on the group's age: at each word the group ends with the hazard above. The
    chain is sequential, but each word's step is a map from age to age ([K] ints), and maps
    compose associatively, so ``associative_scan`` runs it in log2(S) parallel steps. Groups
    never cross a non-candidate ([SEP]): the first word of a segment resets the age. ``v`` is
    uniform [S].
    """
    s, k = ws.shape[0], len(probs)
    seg_first = ws & ~_prev(cand, False)
    seg = jnp.cumsum(seg_first) - 1
    word = jnp.cumsum(ws) - 1
    seg_words = jax.ops.segment_sum(ws.astype(jnp.int32), jnp.maximum(seg, 0), num_segments=s)
    seg_base = jax.lax.cummax(jnp.where(seg_first, word, 0))
    after = jnp.clip(seg_words[jnp.maximum(seg, 0)] - (word - seg_base) - 1, 0, s - 1)
    ages = jnp.arange(k)
    age = jnp.where(seg_first[:, None], 0, ages[None, :]) + 1  # [S, K]: age after this word
    ends = v[:, None] < jnp.asarray(_hazard(tuple(probs), s))[age - 1, after[:, None]]
    maps = jnp.where(ws[:, None], jnp.where(ends, 0, age), ages[None, :])

    def compose(first, then):
        return jnp.take_along_axis(then, first, axis=-1)

    state_after = jax.lax.associative_scan(compose, maps)[:, 0]
    return ws & (_prev(state_after, 0) == 0)


def ngram_units(bits, ex, cfg):
    """MacBERT / ALBERT n-gram masking: units of n whole words, P(n) = ``cfg.ngram_probs``."""
    cand = candidates(ex)
    ws = word_starts(ex, cand)
    return _units(_group_starts(uniform(bits[0]), ws, cand, tuple(cfg.ngram_probs)), cand)


def span_length_probs(p, max_len):
    """SpanBERT's length distribution: geometric(p) over 1..max_len, renormalised (mean 3.8
    words for p=0.2, max 10; SpanBERT truncates and renormalises rather than piling the tail on
    ``max_len``, which would give a mean of 4.5)."""
    n = np.arange(1, max_len + 1)
    w = p * (1 - p) ** (n - 1)
    return tuple(w / w.sum())


def span_units(bits, ex, cfg):
    """SpanBERT: spans of whole words with geometric lengths; every word start is equally likely
    to begin a span because the partition into spans is random."""
    cand = candidates(ex)
    ws = word_starts(ex, cand)
    probs = span_length_probs(cfg.span_p, cfg.span_max)
    return _units(_group_starts(uniform(bits[0]), ws, cand, probs), cand)


def knowledge_units(bits, ex, cfg):
    """ERNIE 1.0 knowledge masking. Each example draws a level from ``cfg.knowledge_probs``:
    0 basic (characters), 1 phrase (the phrase if the token is in one, else its word), 2 entity
    (the entity, else the phrase, else the word). With ``cfg.knowledge_priority`` the level's own
    units are ranked before the words that fill the rest of the budget, so an entity-level
    sequence masks entities first, as the paper's stages intend."""
    for field in ("phrase_ids", "entity_ids"):
        if field not in ex:
            raise UserError(f"masking.scheme='knowledge' needs batch[{field!r}] (ERNIE units)")
    cand = candidates(ex)
    probs = np.asarray(cfg.knowledge_probs, np.float64)
    cdf = jnp.asarray(np.cumsum(probs / probs.sum())[:-1], jnp.float32)
    level = jnp.sum(uniform(bits[0, 0]) >= cdf)
    in_phrase = (ex["phrase_ids"] >= 0) & (level >= 1)
    in_entity = (ex["entity_ids"] >= 0) & (level == 2)
    kind = jnp.where(in_entity, 2, jnp.where(in_phrase, 1, 0))
    uid = jnp.where(in_entity, ex["entity_ids"], jnp.where(in_phrase, ex["phrase_ids"], -1))
    uid = jnp.where(kind == 0, ex["word_ids"], uid)
    changed = (kind != _prev(kind, -1)) | (uid != _prev(uid, -1)) | ~_prev(cand, False)
    start = jnp.where(level == 0, cand, cand & changed)
    fallback = (kind < level) if cfg.knowledge_priority else None
    return _units(start, cand, fallback, knowledge_level=level)


def correction_units(bits, ex, cfg):
    """MacBERT "MLM as correction": n-gram selection; the similar-word replacement that makes it
    correction is the ``mac`` policy, checked in ``mask_batch``."""
    return ngram_units(bits, ex, cfg)


SCHEMES = {
    "token": token_units,
    "whole_word": whole_word_units,
    "ngram": ngram_units,
    "knowledge": knowledge_units,
    "span": span_units,
    "correction": correction_units,
}
