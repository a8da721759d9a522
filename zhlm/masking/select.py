"""Choosing units within BERT's fixed budget, and laying the choice out as [P] predictions.

Budget per example: ``min(P, max(1, round(mask_prob * n)))`` with ``n`` the candidate tokens
(real text tokens; [CLS], [SEP] and padding excluded), never more than ``n``. BERT's fixed
count rather than a Bernoulli draw, so every sequence predicts the same share.

Units are taken in a uniformly random order until the budget is spent. Done as one stable sort
of the tokens by their unit's random key: tokens of one unit share the key, so they are adjacent
in the sorted order (in position order), and a token's rank is the number of candidate tokens
ahead of it. No loop over units and no data-dependent shape, so it vmaps and jits to a sort.

The unit that crosses the budget (``cfg.overflow``): ``truncate`` masks its leading tokens up to
the budget, so every example predicts exactly its budget and at most ONE unit per example is cut
(SpanBERT does the same); ``skip`` stops before it, so units are always whole and examples
predict a little less than the budget (more so for long units).
"""

import jax
import jax.numpy as jnp
import numpy as np

from zhlm.errors import UserError

OVERFLOW = ("truncate", "skip")
_LAST = np.uint32(0xFFFFFFFF)  # sort key of non-candidates: after every unit


def budget(cand, cfg):
    """BERT's per-example prediction count (a traced int32 scalar)."""
    n = jnp.sum(cand, dtype=jnp.int32)
    k = jnp.round(cfg.mask_prob * n.astype(jnp.float32)).astype(jnp.int32)
    return jnp.minimum(jnp.minimum(cfg.max_predictions_per_seq, jnp.maximum(k, 1)), n)


def select_units(bits, units, count, overflow):
    """Returns (selected bool [S], unit index int32 [S], -1 on non-candidates); ``bits`` is
    uint32 [S], one random key per unit number."""
    s = units.cand.shape[0]
    pos = jnp.arange(s, dtype=jnp.int32)
    start = units.start | (units.cand & ~jnp.concatenate([jnp.zeros(1, bool), units.cand[:-1]]))
    unit = jnp.cumsum(start, dtype=jnp.int32) - 1
    unit = jnp.where(units.cand, unit, 0)
    # Two top bits left free: bit 30 ranks fallback units last, and candidates never reach _LAST.
    key = (bits >> 2)[unit] | (units.fallback.astype(jnp.uint32) << 30)
    key = jnp.where(units.cand, key, _LAST)
    order = jnp.argsort(key, stable=True)
    rank = jnp.zeros(s, jnp.int32).at[order].set(pos, unique_indices=True)
    if overflow == "truncate":
        selected = rank < count
    elif overflow == "skip":
        first = jax.lax.cummax(jnp.where(start, pos, 0))
        length = jax.ops.segment_sum(units.cand.astype(jnp.int32), unit, num_segments=s)
        selected = rank - (pos - first) + length[unit] <= count
    else:
        raise UserError(f"masking.overflow={overflow!r}; expected one of {', '.join(OVERFLOW)}")
    return selected & units.cand, jnp.where(units.cand, unit, -1)


def predictions(selected, num_predictions):
    """Selected positions in position order, padded to [P] (position 0, weight 0)."""
    s = selected.shape[0]
    slot = jnp.where(selected, jnp.cumsum(selected, dtype=jnp.int32) - 1, num_predictions)
    positions = jnp.zeros(num_predictions, jnp.int32)
    positions = positions.at[slot].set(jnp.arange(s, dtype=jnp.int32), mode="drop")
    weights = jnp.arange(num_predictions) < jnp.sum(selected)
    return positions, weights


def span_boundaries(selected, positions, weights):
    """SpanBERT SBO inputs for each prediction: the unmasked tokens just outside its maximal run
    of masked tokens (``span_left`` = s-1, ``span_right`` = e+1) and its offset in the run.

    Runs, not sampled spans: two adjacent selected spans form one run, so both boundary tokens
    are always visible tokens, as the SBO head assumes. A run can exceed the head's
    ``sbo_max_span`` only when several spans touch; the head clips the offset.
    """
    s = selected.shape[0]
    pos = jnp.arange(s, dtype=jnp.int32)
    before = jnp.concatenate([jnp.zeros(1, bool), selected[:-1]])
    after = jnp.concatenate([selected[1:], jnp.zeros(1, bool)])
    run_start = jax.lax.cummax(jnp.where(selected & ~before, pos, 0))
    run_end = jax.lax.cummin(jnp.where(selected & ~after, pos, s - 1), reverse=True)
    left = jnp.maximum(run_start - 1, 0)
    right = jnp.minimum(run_end + 1, s - 1)
    offset = pos - run_start
    return {
        name: jnp.where(weights, value[positions], 0)
        for name, value in (("span_left", left), ("span_right", right), ("span_offset", offset))
    }
