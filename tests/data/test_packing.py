"""Packed records on real text: whole instances with their labels, and masks that stay inside.

Why: a packed row is several instances that the model keeps apart by ``segment_ids``; that only
holds if packing copies each instance whole (tokens, types, unit ids, label) and if the masking
drawn on device never forms a unit (a whole word, an n-gram, a span) from tokens of two
instances, nor an SBO boundary outside the span's own instance.
"""

import jax
import numpy as np
import pytest
from helpers import DIALOGUES, check_units, dlm_config, load_config

from zhlm import masking
from zhlm.data import builder, loader, packing, pipeline, text
from zhlm.data.annotate import UNIT_FIELDS


def _build(recipe, path, pack, seq=256):
    config = load_config(recipe, "tiny")
    config.data.max_seq_length, config.data.pack = seq, pack
    batch, report = pipeline.process_shard(text.Shard("train", path), config.data)
    return config, batch, report


def _instances_of(batch):
    """Each row's segments as (per-token fields of its real tokens, sentence label or None)."""
    out = []
    for r in range(len(batch["input_ids"])):
        seg = batch["segment_ids"][r] if "segment_ids" in batch else batch["attention_mask"][r]
        for k in range(1, seg.max() + 1):
            where = seg == k
            fields = {
                n: v[r][where]
                for n, v in batch.items()
                if v.ndim == 2 and v.shape[1] == seg.shape[0] and n != "segment_ids"
            }
            label = batch.get("sentence_label")
            if label is not None:
                label = int(label[r, k - 1] if label.ndim == 2 else label[r])
            out.append((fields, label))
    return out


def _key(fields, label):
    """An instance as bytes, its unit ids counted from 0 (they continue across a packed row)."""
    parts = []
    for name, v in sorted(fields.items()):
        if name in UNIT_FIELDS and (v >= 0).any():
            v = np.where(v >= 0, v - v[v >= 0].min(), -1)
        parts.append(v.tobytes())
    return (*parts, label)


@pytest.mark.parametrize("recipe", ["bert", "ernie", "spanbert"])
def test_packing_keeps_every_instance_whole_with_its_label(clue_sample, recipe):
    _, plain, _ = _build(recipe, clue_sample, False)
    config, packed, report = _build(recipe, clue_sample, True)
    assert report.counts["packed_rows"] == len(packed["input_ids"]) < len(plain["input_ids"])
    k = packing.max_instances(config.data.max_seq_length)
    assert packed["instance_starts"].shape == (len(packed["input_ids"]), k)
    want = sorted(_key(f, label) for f, label in _instances_of(plain))
    got = sorted(_key(f, label) for f, label in _instances_of(packed))
    assert got == want  # the same instances, none split, each with its label
    seg, starts = packed["segment_ids"], packed["instance_starts"]
    rows = np.arange(len(seg))[:, None]
    used = np.arange(k)[None, :] < seg.max(1)[:, None]
    assert (seg[rows, starts][used] == np.broadcast_to(np.arange(1, k + 1), used.shape)[used]).all()
    assert (packed["input_ids"][rows, starts][used] == 101).all()  # each slot points at a [CLS]
    if "sentence_label" in packed:
        assert ((packed["sentence_label"] >= 0) == used).all()
    real = (packed["attention_mask"] == 1) & (packed["word_ids"] >= 0)
    check_units(packed["word_ids"], real)  # unique and in order within the row
    assert ((seg > 0) == (packed["attention_mask"] == 1)).all()
    share = packed["attention_mask"].mean()
    assert share > plain["attention_mask"].mean() and share > 0.9, share


def _plain_row(n, seq):
    """An unpacked row of ``n`` real tokens: [CLS], then ``n - 1`` tokens numbered from 1000."""
    ids = np.zeros(seq, np.int32)
    ids[0], ids[1:n] = 101, 1000 + np.arange(n - 1)
    return {
        "input_ids": ids,
        "token_type_ids": np.zeros(seq, np.int32),
        "attention_mask": (np.arange(seq) < n).astype(np.int32),
    }


def test_an_instance_goes_into_the_fullest_row_it_fits():
    # First-fit would put 28 after 60 (the first row with room); then 68 fits nowhere: 3 rows.
    # Best-fit puts 28 after 100 (least room left), so 60 keeps room for 68: 2 full rows.
    lengths = [60, 100, 28, 68]
    rows = packing.pack([_plain_row(n, 128) for n in lengths], 128, 0)
    got = sorted(tuple(np.bincount(r["segment_ids"])[1:].tolist()) for r in rows)
    assert got == [(60, 68), (100, 28)]
    assert all(r["attention_mask"].all() for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["spanbert", "macbert", "ernie", "roberta_wwm"])
def test_masking_never_crosses_an_instance(clue_sample, recipe):
    config, batch, _ = _build(recipe, clue_sample, True)
    fields = ("input_ids", "attention_mask", "word_ids") + tuple(config.data.fields)
    ex = {n: batch[n] for n in fields}
    out, details = jax.jit(lambda b, k: masking.mask_batch(b, k, config, details=True))(
        ex, jax.random.key(0)
    )
    seg = batch["segment_ids"]
    unit, selected = np.asarray(details["unit_index"]), np.asarray(details["selected"])
    assert selected.any()
    for r in range(len(seg)):
        for u in np.unique(unit[r][unit[r] >= 0]):
            assert len(set(seg[r][unit[r] == u].tolist())) == 1, (recipe, r, u)
    assert (batch["word_ids"][selected] >= 0).all()  # never [CLS], [SEP] or padding
    if "span_left" in out:
        rows = np.arange(len(seg))[:, None]
        pos, w = np.asarray(out["masked_positions"]), np.asarray(out["masked_weights"]) > 0
        for side in ("span_left", "span_right"):
            boundary = np.asarray(out[side])
            assert (seg[rows, boundary][w] == seg[rows, pos][w]).all(), side


def test_packed_dataset_through_the_loader(clue_sample, tmp_path):
    config = load_config("albert", "tiny")
    config.data.pack = True
    b, _ = builder.prepare(config.data, config.recipe, [clue_sample], str(tmp_path), 1, False)
    assert b.info.config_name.endswith("_packed")
    batch = next(iter(loader.Loader(b.data_dir, "", 4, process_index=0, process_count=1)))
    k = packing.max_instances(config.data.max_seq_length)
    assert batch["segment_ids"].shape == (4, config.data.max_seq_length)
    assert batch["instance_starts"].shape == batch["sentence_label"].shape == (4, k)
    assert ((batch["segment_ids"] > 0) == (batch["attention_mask"] > 0)).all()


@pytest.mark.slow
def test_dialogue_records_pack_with_their_roles_and_labels(tmp_path):
    lines = open(DIALOGUES, encoding="utf-8").read().splitlines()[:120]
    path = tmp_path / "dialogues.jsonl"
    path.write_text("\n".join(lines) + "\n", "utf-8")
    out = {}
    for pack in (False, True):
        config = dlm_config()
        config.data.pack = pack
        out[pack], _ = pipeline.process_shard(text.Shard("dialogue", str(path)), config.data)
    assert len(out[True]["input_ids"]) < len(out[False]["input_ids"])
    want = sorted(_key(f, label) for f, label in _instances_of(out[False]))
    assert sorted(_key(f, label) for f, label in _instances_of(out[True])) == want
