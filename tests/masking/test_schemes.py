"""Statistical tests of zhlm.masking on real text (People's Daily gold words, CLUE + jieba).

Why statistics on real text: the schemes differ only in which tokens form a unit, and their bugs
(a word masked in half, a span length off by one, a special token replaced) show up as numbers
on real word-length and entity distributions, not on toy inputs. Each test checks >= 10,000
sequences with vectorised numpy. One compiled function per config is shared through ``_run``
(compiling dominates the run time on CPU), so each config below serves several tests.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import realtext

from zhlm import defaults, masking

P = 20
SPECIAL_MAX = 105  # every id <= 105 in the Google vocab is a special or unused entry
# One replacement policy per scheme, so each compiled config also checks a policy.
SCHEMES = {
    "token": "partial_mask",
    "whole_word": "all_mask",
    "ngram": "random",
    "knowledge": "partial_mask",
    "span": "partial_mask",
    "correction": "mac",
}


def config(scheme, replacement=None, **masking_overrides):
    c = defaults.get_base_config()
    c.masking.scheme = scheme
    c.masking.replacement = replacement or SCHEMES[scheme]
    c.masking.max_predictions_per_seq = P
    for k, v in masking_overrides.items():
        c.masking[k] = v
    return c


@functools.cache
def corpus(name="peoples_daily"):
    return realtext.cached(name, 128)


@functools.cache
def _compiled(key):
    scheme, replacement, overrides = key
    c = config(scheme, replacement, **dict(overrides))
    return jax.jit(lambda b, k: masking.mask_batch(b, k, c, details=True))


def _run(scheme, replacement=None, corpus_name="peoples_daily", seed=0, **overrides):
    """(numpy batch, numpy output, numpy details) for one config on a whole corpus, cached;
    ``seed`` is an int (the key) or a (seed, step) pair (the key folded with the step)."""
    key = (scheme, replacement or SCHEMES[scheme], tuple(sorted(overrides.items())))
    return _cached_run(key, corpus_name, seed)


@functools.cache
def _cached_run(key, corpus_name, seed):
    batch = corpus(corpus_name)
    rng = (
        jax.random.key(seed)
        if isinstance(seed, int)
        else jax.random.fold_in(jax.random.key(seed[0]), seed[1])
    )
    out, details = _compiled(key)({k: jnp.asarray(v) for k, v in batch.items()}, rng)
    return batch, jax.tree.map(np.asarray, out), jax.tree.map(np.asarray, details)


def expected_budget(batch, p=P, prob=0.15):
    n = ((batch["word_ids"] >= 0) & (batch["attention_mask"] > 0)).sum(1)
    return np.minimum(np.minimum(p, np.maximum(np.round(prob * n), 1)), n), n


def unit_table(batch, details):
    """Per selection unit that has a selected token: (sequence, words in unit, selected tokens,
    tokens in unit). Unit numbers restart per sequence, so keys are (row, unit)."""
    unit, sel, w = details["unit_index"], details["selected"], batch["word_ids"]
    b, s = unit.shape
    starts = np.ones_like(w, bool)
    starts[:, 1:] = (w[:, 1:] != w[:, :-1]) | (unit[:, 1:] != unit[:, :-1])
    valid = unit >= 0
    key = (np.arange(b)[:, None] * s + unit)[valid]
    words = np.bincount(key, starts[valid], b * s)
    chosen = np.bincount(key, sel[valid], b * s)
    tokens = np.bincount(key, minlength=b * s)
    keep = chosen > 0
    return np.nonzero(keep)[0] // s, words[keep].astype(int), chosen[keep], tokens[keep]


def check_integrity(batch, sel, ids):
    """For units given by ``ids`` [B,S] (>= 0 inside a unit, contiguous runs are units): the
    number of units masked in part, per sequence, and whether each partial one is a prefix."""
    b, s = ids.shape
    valid = ids >= 0
    start = valid.copy()
    start[:, 1:] &= (ids[:, 1:] != ids[:, :-1]) | ~valid[:, :-1]
    run = np.cumsum(start.ravel()) - 1
    run = np.where(valid.ravel(), run, -1)
    m = run >= 0
    n_tok = np.bincount(run[m])
    n_sel = np.bincount(run[m], sel.ravel()[m], len(n_tok))
    partial = (n_sel > 0) & (n_sel < n_tok)
    row_of_run = (np.nonzero(start.ravel())[0]) // s
    per_row = np.bincount(row_of_run[partial], minlength=b)
    # A cut unit is masked as a prefix: no unmasked token before a masked one inside the unit.
    flat_sel = sel.ravel()
    prev_same = np.zeros_like(m)
    prev_same[1:] = (run[1:] == run[:-1]) & m[1:]
    gap_then_mask = prev_same & flat_sel & ~np.concatenate([[False], flat_sel[:-1]])
    return per_row, int(gap_then_mask.sum()), int(partial.sum()), len(n_tok)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_budget_fraction_and_layout(scheme):
    batch, out, d = _run(scheme)
    assert len(batch["input_ids"]) >= 10_000
    budget, n = expected_budget(batch)
    sel = d["selected"]
    np.testing.assert_array_equal(sel.sum(1), budget)  # BERT's fixed count, cap respected
    frac = sel.sum() / n.sum()
    assert abs(frac - 0.15) <= 0.003, frac
    w = out["masked_weights"]
    np.testing.assert_array_equal(w.sum(1), budget)
    pos = out["masked_positions"]
    real = w > 0
    # Positions: increasing, exactly the selected tokens, originals as labels; padding zeros.
    assert (np.diff(pos, axis=1)[real[:, 1:]] > 0).all()
    rows = np.nonzero(real)[0]
    assert sel[rows, pos[real]].all()
    np.testing.assert_array_equal(out["masked_ids"][real], batch["input_ids"][rows, pos[real]])
    assert (pos[~real] == 0).all() and (out["masked_ids"][~real] == 0).all()
    assert set(np.unique(w)) <= {0.0, 1.0}


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_specials_never_touched(scheme):
    batch, out, d = _run(scheme)
    special = batch["word_ids"] < 0
    np.testing.assert_array_equal(out["input_ids"][special], batch["input_ids"][special])
    assert not d["selected"][special].any()
    changed = out["input_ids"] != batch["input_ids"]
    assert not (changed & ~d["selected"]).any()
    new = out["input_ids"][changed]
    assert ((new == masking_cfg().mask_token_id) | (new > SPECIAL_MAX)).all()
    rand = d["replacement"] == masking.RANDOM
    assert (out["input_ids"][rand] >= 106).all() and (out["input_ids"][rand] < 21128).all()


def masking_cfg():
    return defaults.get_base_config().masking


SPLITS = [(policy, scheme) for scheme, policy in SCHEMES.items() if scheme != "knowledge"]


@pytest.mark.parametrize("policy,scheme", SPLITS)
def test_replacement_split(policy, scheme):
    batch, out, d = _run(scheme, policy)
    code = d["replacement"][d["selected"]]
    want = dict(
        zip(
            (masking.MASK, masking.SIMILAR, masking.RANDOM, masking.KEEP),
            masking.POLICIES[policy],
            strict=True,
        )
    )
    for c, p in want.items():
        assert abs(np.mean(code == c) - p) <= 0.01, (c, np.mean(code == c), p)
    # Each decision did what it says, read from the public output.
    ids, orig = out["input_ids"], batch["input_ids"]
    rep = d["replacement"]
    assert (ids[rep == masking.MASK] == 103).all()
    assert (ids[rep == masking.KEEP] == orig[rep == masking.KEEP]).all()
    sim = rep == masking.SIMILAR
    real_similar = batch["similar_ids"][sim] >= 106  # [UNK] candidates fall back to random
    np.testing.assert_array_equal(ids[sim][real_similar], batch["similar_ids"][sim][real_similar])
    assert (ids[sim] >= 106).all()
    r = rep == masking.RANDOM
    assert (ids[r] >= 106).all()
    if r.any():  # uniform over the real vocabulary, so it rarely keeps the token by chance
        assert np.mean(ids[r] == orig[r]) < 0.001
        assert np.unique(ids[r]).size > 0.5 * min(r.sum(), 21128 - 106)


def test_replacement_per_unit():
    batch, out, d = _run("whole_word", "partial_mask", replacement_unit="unit")
    rep, unit, sel = d["replacement"], d["unit_index"], d["selected"]
    rows = np.nonzero(sel)[0]
    key = rows * 128 + unit[sel]
    codes = rep[sel]
    order = np.argsort(key, kind="stable")
    same_unit = key[order][1:] == key[order][:-1]
    assert (codes[order][1:][same_unit] == codes[order][:-1][same_unit]).all()
    for c, p in ((masking.MASK, 0.8), (masking.RANDOM, 0.1), (masking.KEEP, 0.1)):
        assert abs(np.mean(codes == c) - p) <= 0.01


@pytest.mark.parametrize(
    "corpus_name", ["peoples_daily", pytest.param("clue", marks=pytest.mark.slow)]
)
def test_whole_word_integrity(corpus_name):
    batch, out, d = _run("whole_word", corpus_name=corpus_name)
    assert len(batch["input_ids"]) >= 5_000
    per_row, not_prefix, partial, units = check_integrity(batch, d["selected"], batch["word_ids"])
    assert per_row.max() <= 1  # only the word the budget cuts
    assert not_prefix == 0
    budget, n = expected_budget(batch)
    np.testing.assert_array_equal(d["selected"].sum(1), budget)
    print(f"{corpus_name}: {partial} of {units} words cut by the budget")


def test_skip_overflow_keeps_every_unit_whole():
    batch, _, d = _run("span", overflow="skip")
    per_row, _, partial, _ = check_integrity(batch, d["selected"], d["unit_index"])
    assert partial == 0
    budget, n = expected_budget(batch)
    assert (d["selected"].sum(1) <= budget).all()
    print(f"skip: masked fraction {d['selected'].sum() / n.sum():.4f}")


def test_cap():
    batch, _, d = _run("token", max_predictions_per_seq=12)
    budget, _ = expected_budget(batch, p=12)
    np.testing.assert_array_equal(d["selected"].sum(1), budget)
    assert budget.max() == 12


def _length_histogram(scheme):
    batch, _, d = _run(scheme)
    _, words, _, _ = unit_table(batch, d)
    return words


def test_ngram_distribution():
    words = _length_histogram("ngram")
    hist = np.bincount(words, minlength=5)[1:] / len(words)
    np.testing.assert_allclose(hist, [0.4, 0.3, 0.2, 0.1], atol=0.02)


def test_span_lengths():
    words = _length_histogram("span")
    probs = np.array(masking.span_length_probs(0.2, 10))
    hist = np.bincount(words, minlength=11)[1:] / len(words)
    assert words.max() <= 10
    assert abs(words.mean() - 3.8) <= 0.1, words.mean()
    np.testing.assert_allclose(hist, probs, atol=0.01)


def test_span_boundaries():
    batch, out, d = _run("span")
    w = out["masked_weights"] > 0
    rows = np.nonzero(w)[0]
    pos, left, right = (out[k][w] for k in ("masked_positions", "span_left", "span_right"))
    sel = d["selected"]
    assert ((left < pos) & (pos < right)).all()
    assert not sel[rows, left].any() and not sel[rows, right].any()  # boundaries are visible
    np.testing.assert_array_equal(out["span_offset"][w], pos - left - 1)
    # Everything strictly between the boundaries is masked (the run is maximal and contiguous).
    inside = np.cumsum(sel, 1)
    np.testing.assert_array_equal(inside[rows, right - 1] - inside[rows, left], right - left - 1)
    for k in ("span_left", "span_right", "span_offset"):
        assert (out[k][~w] == 0).all()


def test_knowledge_levels_integrity_and_priority():
    batch, _, d = _run("knowledge")
    level, sel = d["knowledge_level"], d["selected"]
    np.testing.assert_allclose(np.bincount(level, minlength=3) / len(level), [1 / 3] * 3, atol=0.02)
    ent, phr, word = batch["entity_ids"], batch["phrase_ids"], batch["word_ids"]
    for lvl, ids in ((1, np.where(phr >= 0, phr, -1)), (2, np.where(ent >= 0, ent, -1))):
        rows = level == lvl
        per_row, not_prefix, _, _ = check_integrity(
            {k: v[rows] for k, v in batch.items()}, sel[rows], ids[rows]
        )
        assert per_row.max() <= 1 and not_prefix == 0
        # Priority: a level's plain words are masked only once all its units are.
        own = (ids >= 0)[rows]
        plain_masked = (sel[rows] & ~own & (word[rows] >= 0)).any(1)
        all_own_masked = (sel[rows] | ~own).all(1)
        assert (~plain_masked | all_own_masked).all()
        share = (sel[rows] & own).sum() / sel[rows].sum()
        print(f"level {lvl}: {share:.3f} of masked tokens in units, {own.mean():.3f} of tokens")
    # Phrase level: a phrase-or-word unit is whole too.
    rows = level == 1
    pw = np.where(phr >= 0, 10_000 + phr, word)[rows]
    per_row, _, _, _ = check_integrity({k: v[rows] for k, v in batch.items()}, sel[rows], pw)
    assert per_row.max() <= 1


def test_same_key_same_mask_next_step_differs():
    _, a, _ = _run("ngram", seed=(7, 3))
    key = ("ngram", SCHEMES["ngram"], ())
    _, b, _ = _cached_run.__wrapped__(key, "peoples_daily", (7, 3))  # recomputed, not cached
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    _, nxt, _ = _run("ngram", seed=(7, 4))
    same = (a["masked_positions"] == nxt["masked_positions"]).all(1)
    assert same.mean() < 0.01


def test_config_errors():
    batch = {k: jnp.asarray(v[:4]) for k, v in corpus().items()}
    key = jax.random.key(0)
    for bad in (
        dict(scheme="nope"),
        dict(scheme="correction", replacement="partial_mask"),
        dict(replacement="nope"),
        dict(overflow="nope"),
        dict(replacement_unit="nope"),
    ):
        c = config("token")
        for k, v in bad.items():
            c.masking[k] = v
        with pytest.raises(ValueError):
            jax.eval_shape(lambda b, k, c=c: masking.mask_batch(b, k, c), batch, key)
    for scheme, field in (("knowledge", "entity_ids"), ("correction", "similar_ids")):
        short = {k: v for k, v in batch.items() if k != field}
        with pytest.raises(ValueError, match=field):
            jax.eval_shape(lambda b, k, s=scheme: masking.mask_batch(b, k, config(s)), short, key)


def test_check_vocab():
    tokens, _ = realtext.vocab()
    cfg = masking_cfg()
    masking.check_vocab(tokens, cfg, 21128)
    with pytest.raises(ValueError):
        masking.check_vocab(tokens[:200] + ["[unused100]"] + tokens[201:], cfg, 21128)
    with pytest.raises(ValueError):
        masking.check_vocab(tokens, cfg, 30000)
