"""Replacement policies: what a selected token becomes, separate from which tokens are selected.

The four rows of MacBERT's ablation, as probabilities of (``[MASK]``, similar word, random token,
keep). The decision is drawn per token (Google's BERT and whole-word-masking code) or once per
selection unit (``cfg.replacement_unit='unit'``: a whole word, n-gram, span or entity becomes
[MASK], its similar word, random tokens or stays, together; the natural reading of MacBERT,
whose similar word replaces the whole word).

Vocabulary layout (``cfg.mask_token_id``, ``cfg.random_token_min``, ``config.model.vocab_size``):
random tokens are uniform over ``[random_token_min, vocab_size)``. In the Google Chinese vocab
every id below 106 is [PAD], [unusedN], [UNK], [CLS], [SEP], [MASK], <S> or <T> and every id from
106 on is real vocabulary, so random tokens are never special. ``check_vocab`` verifies a vocab
file against that layout; a vocab trained with sentencepiece must put its specials first too.
"""

import re
from typing import NamedTuple

import jax.numpy as jnp

from zhlm.errors import UserError
from zhlm.masking.schemes import uniform

KEEP, MASK, RANDOM, SIMILAR = 0, 1, 2, 3  # decision codes, in ``details['replacement']``


class Policy(NamedTuple):
    """Probabilities of each replacement, in the order the thresholds are cut."""

    mask: float  # [MASK]
    similar: float  # a similar word (batch['similar_ids'])
    random: float  # a random token
    keep: float  # the original token


POLICIES = {
    "mac": Policy(0.0, 0.8, 0.1, 0.1),
    "random": Policy(0.0, 0.0, 0.9, 0.1),
    "partial_mask": Policy(0.8, 0.0, 0.1, 0.1),
    "all_mask": Policy(0.9, 0.0, 0.0, 0.1),
}
REPLACEMENT_UNITS = ("token", "unit")
_SPECIAL = re.compile(r"^(\[[A-Za-z]+\d*\]|<[A-Za-z]+>|\[unused\d+\])$")


def policy(name):
    if name not in POLICIES:
        raise UserError(f"masking.replacement={name!r}; expected one of {', '.join(POLICIES)}")
    return POLICIES[name]


def replace(bits, ex, selected, unit, cfg, vocab_size):
    """Returns (corrupted input_ids [S], decision codes int32 [S], -1 where not selected).

    ``bits`` is uint32 [2, S]: row 0 decides, row 1 picks random tokens (modulo the range; the
    bias is below range / 2**32, 5e-6 relative for the Google vocab)."""
    probs = policy(cfg.replacement)
    if cfg.replacement_unit not in REPLACEMENT_UNITS:
        raise UserError(
            f"masking.replacement_unit={cfg.replacement_unit!r}; expected token or unit"
        )
    u = uniform(bits[0])
    if cfg.replacement_unit == "unit":
        u = u[jnp.maximum(unit, 0)]  # one draw per unit: index by the unit's number
    # Thresholds as Python floats so the policy table is folded into the compiled step.
    c_mask, c_similar, c_random = (sum(probs[: i + 1]) for i in range(3))
    decision = jnp.where(
        u < c_mask, MASK, jnp.where(u < c_similar, SIMILAR, jnp.where(u < c_random, RANDOM, KEEP))
    )
    ids = ex["input_ids"]
    span = vocab_size - cfg.random_token_min
    random_ids = (cfg.random_token_min + bits[1] % jnp.uint32(span)).astype(ids.dtype)
    new = jnp.where(decision == MASK, jnp.asarray(cfg.mask_token_id, ids.dtype), ids)
    new = jnp.where(decision == RANDOM, random_ids, new)
    if probs.similar > 0:
        if "similar_ids" not in ex:
            raise UserError(f"masking.replacement={cfg.replacement!r} needs batch['similar_ids']")
        # The data aligns a similar (or same-length random) word; where it has none (-1), or
        # the candidate is a special such as [UNK], fall back to a random token.
        good = ex["similar_ids"] >= cfg.random_token_min
        similar = jnp.where(good, ex["similar_ids"], random_ids)
        new = jnp.where(decision == SIMILAR, similar, new)
    return jnp.where(selected, new, ids), jnp.where(selected, decision, -1)


def check_vocab(tokens, cfg, vocab_size):
    """Raises UserError unless ``tokens`` (the vocab, id order) fits the masking layout:
    [MASK] at ``mask_token_id``, no special or [unusedN] token at or above ``random_token_min``,
    and ``vocab_size`` rows."""
    if len(tokens) != vocab_size:
        raise UserError(f"vocab has {len(tokens)} tokens, config.model.vocab_size={vocab_size}")
    if tokens[cfg.mask_token_id] != "[MASK]":
        found = tokens[cfg.mask_token_id]
        raise UserError(f"masking.mask_token_id={cfg.mask_token_id} is {found!r}, not [MASK]")
    bad = [(i, t) for i, t in enumerate(tokens) if i >= cfg.random_token_min and _SPECIAL.match(t)]
    if bad:
        raise UserError(f"special tokens inside the random-replacement range: {bad[:5]}")
