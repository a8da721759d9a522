"""On-device dynamic masking for the six BERT-family recipes.

Masks are drawn inside the jitted train step from the step's key (RoBERTa's dynamic masking), so
no static mask is stored and the accelerator never waits on host-side masking. One entry point,
``mask_batch``; a scheme only says which tokens form a unit (``schemes.SCHEMES``, picked by
``config.masking.scheme``), the budgeted selection (``select``) and the replacement policy
(``replace.POLICIES``, picked by ``config.masking.replacement``) are shared by all of them.

Everything is written for ONE example and vmapped over the batch. All randomness is ONE draw of
uint32 bits [B, 4, S] from the key (rows: unit order, replacement decision, random token, and
the n-gram / span partition or the ERNIE level): one threefry op instead of one per use
keeps XLA compile time low and, with ``jax_threefry_partitionable`` (JAX's default since 0.5,
the oldest JAX setup.py admits; ``_check`` refuses to mask with it off), makes the bits, and so
the masks, independent of how the batch is sharded. Shapes are static: [B,S] in, [B,S], [B,P] out.

Batch fields read (int32 [B,S]): ``input_ids``, ``attention_mask``, ``word_ids`` (all schemes;
-1 on [CLS]/[SEP]/padding, which are never selected); ``phrase_ids``, ``entity_ids``
(``knowledge``); ``similar_ids`` (policy ``mac``). Fields written: ``input_ids`` (corrupted),
``masked_positions``, ``masked_ids``, ``masked_weights`` [B,P] and, for ``span`` or a model with
the SBO head, ``span_left``, ``span_right``, ``span_offset`` [B,P]. Other fields pass through.
"""

import jax
import jax.numpy as jnp

from zhlm.errors import UserError
from zhlm.masking.replace import KEEP, MASK, POLICIES, RANDOM, SIMILAR, check_vocab, replace
from zhlm.masking.schemes import SCHEMES, span_length_probs
from zhlm.masking.select import budget, predictions, select_units, span_boundaries

__all__ = [
    "KEEP",
    "MASK",
    "POLICIES",
    "RANDOM",
    "SCHEMES",
    "SIMILAR",
    "check_vocab",
    "mask_batch",
    "span_length_probs",
]

# Fields a scheme may read; only those present are passed into the vmapped function.
_ROWS = 4  # rows of random bits per example, see the module docstring
_FIELDS = ("input_ids", "attention_mask", "word_ids", "phrase_ids", "entity_ids", "similar_ids")


def _check(config):
    if not jax.config.jax_threefry_partitionable:
        raise UserError(
            "jax_threefry_partitionable is off: masks would depend on the sharding; turn it on "
            "(JAX's default since 0.5)"
        )
    cfg = config.masking
    if cfg.scheme not in SCHEMES:
        raise UserError(f"masking.scheme={cfg.scheme!r}; expected one of {', '.join(SCHEMES)}")
    if cfg.scheme == "correction" and POLICIES[cfg.replacement].similar == 0:
        raise UserError(
            "masking.scheme='correction' replaces with similar words: use replacement='mac' "
            f"(got {cfg.replacement!r}; plain n-gram selection is scheme='ngram')"
        )
    if not 0 <= cfg.random_token_min < config.model.vocab_size:
        raise UserError(f"masking.random_token_min={cfg.random_token_min} outside the vocab")


def _mask_example(bits, ex, config):
    cfg = config.masking
    units = SCHEMES[cfg.scheme](bits[3:], ex, cfg)
    count = budget(units.cand, cfg)
    selected, unit = select_units(bits[0], units, count, cfg.overflow)
    input_ids, decision = replace(bits[1:3], ex, selected, unit, cfg, config.model.vocab_size)
    positions, weights = predictions(selected, cfg.max_predictions_per_seq)
    out = {
        "input_ids": input_ids,
        "masked_positions": positions,
        "masked_ids": jnp.where(weights, ex["input_ids"][positions], 0),
        "masked_weights": weights.astype(jnp.float32),
    }
    if cfg.scheme == "span" or config.model.span_boundary_head:
        out.update(span_boundaries(selected, positions, weights))
    details = {"selected": selected, "unit_index": unit, "replacement": decision, **units.extras}
    return out, details


def mask_batch(batch, rng, config, details=False):
    """Masks a batch for the MLM objective of ``config.masking.scheme``; pure and jittable.

    Args:
      batch: dict of int32 [B,S] arrays (see the module docstring); other keys pass through.
      rng: a PRNG key, e.g. ``jax.random.fold_in(key, step)`` so every step masks afresh.
      config: the whole config (``config.masking.*``, ``config.model.vocab_size``).
      details: also return ``selected`` [B,S] bool, ``unit_index`` [B,S] (the selection unit of
        each token, -1 off candidates), ``replacement`` [B,S] (KEEP/MASK/RANDOM/SIMILAR codes,
        -1 where not selected) and scheme extras such as ``knowledge_level`` [B]; for tests.

    Returns:
      ``batch`` with ``input_ids`` corrupted and the prediction fields added; P is
      ``config.masking.max_predictions_per_seq``.
    """
    _check(config)
    ex = {k: batch[k] for k in _FIELDS if k in batch}
    b, s = batch["input_ids"].shape
    bits = jax.random.bits(rng, (b, _ROWS, s), jnp.uint32)
    out, extra = jax.vmap(lambda r, e: _mask_example(r, e, config))(bits, ex)
    out = {**batch, **out}
    return (out, extra) if details else out
