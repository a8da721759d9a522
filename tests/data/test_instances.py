"""The four input formats, with every field the recipes' masking reads, on real text.

Why invariants over examples: masking relies on the conventions (ids -1 exactly at specials and
padding, units contiguous and unique within a sequence, labels per BERT's convention), so those
are checked on every sequence the real corpora produce, for every recipe config.
"""

import numpy as np
import pytest
from helpers import CLS, PAD, SEP, check_common, check_units, load_config

from zhlm.data import pipeline, text


def _build(recipe, path, **data):
    """One shard's records of ``recipe``, an instance a row (packing has its own tests)."""
    data.setdefault("pack", False)
    config = load_config(recipe, "tiny")
    for k, v in data.items():
        setattr(config.data, k, v)
    batch, report = pipeline.process_shard(text.Shard("train", path), config.data)
    return config, batch, report


def test_segment_pair_nsp(clue_sample):
    config, batch, report = _build("bert", clue_sample)
    check_common(config, batch)
    seps = (batch["input_ids"] == SEP).sum(1)
    assert (seps == 2).all()
    tt = batch["token_type_ids"]
    first_sep = (batch["input_ids"] == SEP).argmax(1)
    for row, f, n in zip(tt, first_sep, batch["attention_mask"].sum(1), strict=True):
        assert (row[: f + 1] == 0).all() and (row[f + 1 : n] == 1).all() and (row[n:] == 0).all()
    labels = batch["sentence_label"]
    # 50% random plus BERT's forced random B for one-sentence chunks
    assert 0.4 < labels.mean() < 0.75
    assert report.counts["instances"] == len(labels)


def test_sop_and_similar_ids(clue_sample):
    config, batch, _ = _build("macbert", clue_sample)
    real = check_common(config, batch)
    assert 0.35 < batch["sentence_label"].mean() < 0.65
    assert ((batch["input_ids"] == SEP).sum(1) == 2).all()
    sim = batch["similar_ids"]
    assert (sim[~real] == -1).all() and (sim[real] >= 0).all()
    assert (sim[real] != batch["input_ids"][real]).mean() > 0.8  # replacements, not copies


def test_sop_swaps_in_order_segments():
    # token ids rising through the document: in-order pairs have max(A) < min(B)
    import random

    from zhlm.data import annotate, instances

    starts = np.arange(0, 400, 8, dtype=np.int32)
    doc = annotate.Document(
        {
            "input_ids": np.arange(1000, 1400, dtype=np.int32),
            "word_ids": np.arange(400, dtype=np.int32),
        },
        np.append(starts, 400),
    )
    writer = instances.Writer(64, (), CLS, SEP, PAD)
    rows = list(instances.pair_instances([doc], 0, writer, "sop", 0.0, random.Random(0), None))
    assert len(rows) >= 6  # 400 tokens, 61 per pair
    for row in rows:
        ids = row["input_ids"]
        seps = np.flatnonzero(ids == SEP)
        a, b = ids[1 : seps[0]], ids[seps[0] + 1 : seps[1]]
        assert row["sentence_label"] == (0 if a.max() < b.min() else 1)
        assert (b.max() < a.min()) == (row["sentence_label"] == 1)


def test_full_sentences_pack_across_documents(clue_sample):
    config, batch, _ = _build("roberta_wwm", clue_sample, short_seq_prob=0.0)
    check_common(config, batch)
    assert (batch["token_type_ids"] == 0).all()
    assert ((batch["input_ids"] == SEP).sum(1) >= 2).any()  # a document boundary inside
    assert batch["attention_mask"].mean() > 0.75
    assert "sentence_label" not in batch


def test_doc_sentences_never_cross_documents(clue_sample):
    config, batch, report = _build("spanbert", clue_sample)
    check_common(config, batch)
    assert ((batch["input_ids"] == SEP).sum(1) == 1).all()
    # every token of the corpus lands in exactly one sequence
    assert batch["attention_mask"].sum() - 2 * len(batch["input_ids"]) == report.counts["tokens"]


@pytest.mark.slow
def test_ernie_phrase_and_entity_ids():
    from zhlm.data import annotate

    config, batch, _ = _build("ernie", annotate.resource("peoples_daily_199801_sample.txt"))
    real = check_common(config, batch)
    for name in ("phrase_ids", "entity_ids"):
        check_units(batch[name], real)
        assert (batch[name] >= 0).mean() > 0.03
    both = (batch["phrase_ids"] >= 0) & (batch["entity_ids"] >= 0)
    assert not both.any()  # entities are never inside phrases


def test_renumber_equals_rank_of_distinct_ids():
    """Unit ids become 0, 1, ... per sequence: the ascending fast path and the sorting
    fallback both give the rank of each id among the distinct ids, -1 kept."""
    from zhlm.data.instances import _renumber

    rng = np.random.default_rng(0)
    for trial in range(400):
        values = rng.integers(-1, 12, int(rng.integers(1, 40))).astype(np.int32)
        if trial % 2:
            values = np.sort(values)  # the shape annotate produces
        first = int(rng.integers(0, 5))
        real = values >= 0
        want, want_next = values, first
        if real.any():
            distinct, rank = np.unique(values[real], return_inverse=True)
            want = np.full(len(values), -1, np.int32)
            want[real] = rank + first
            want_next = first + len(distinct)
        got, got_next = _renumber(values, first)
        assert np.array_equal(got, want) and got_next == want_next, values
