"""ERNIE 1.0's dialogue language model on the real dialogues: the draws (fake share, fakes never
from their own dialogue, roles alternating as the turns do), the records (ERNIE's fields, the
role ids in the token types, the label), the mixture with text, and a tiny DLM pretraining whose
real/fake accuracy on held-out dialogues rises above 60%, then judges them the same once
exported to Hugging Face.

Why the whole file for the statistics: the dialogues come from three sources of very different
lengths and turn counts (KdConv, CrossWOZ, chatterbot), so a share measured on a slice of one of
them would not say what a run on all of them gets.
"""

import collections
import json
import random
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import (
    DIALOGUES,
    ROOT,
    SEP,
    check_common,
    check_units,
    dlm_config,
    without_opt_level_zero,
)

from zhlm.data import builder, dialogue, instances, pipeline, text
from zhlm.data.loader import Loader, dataset_dir

DLM_STEPS = 1200  # the accuracy test's run (its docstring)


def _writer(ann, data_config):
    tok = ann.tokenizer
    ids = [tok.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]")]
    return instances.Writer(data_config.max_seq_length, ann.fields, *ids)


@pytest.fixture(scope="module")
def real():
    """All 2,367 dialogues planned and written as the pipeline does (same seed and order), with
    the plan kept. No phrase/entity fields here: POS tagging all 833k tokens would triple the
    time and the draws do not depend on it (test_records_have_ernie_fields covers them)."""
    config = dlm_config(fields=())
    shard = text.Shard("dialogue", DIALOGUES)
    report = text.Report()
    ann = pipeline._annotator(config.data)
    seed = pipeline.shard_seed(config.data.seed, shard)
    py_rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    turns = dialogue.read_dialogues(shard, config.data, report)
    dialogues = dialogue.annotate(turns, ann, np_rng, report)
    writer = _writer(ann, config.data)
    windows = list(dialogue.plan(dialogues, writer.length - 1, 0.1, py_rng, report))
    rows = [dialogue.write(w, dialogues, writer, py_rng) for w in windows]
    return dialogues, windows, rows, report


@pytest.mark.slow
def test_fake_share_is_half(real):
    _, windows, rows, _ = real
    labels = np.array([w.label for w in windows])
    assert len(labels) > 8000
    assert abs(labels.mean() - 0.5) <= 0.02, labels.mean()
    assert [int(r["sentence_label"]) for r in rows] == labels.tolist()


@pytest.mark.slow
def test_fake_turn_never_from_its_own_dialogue(real):
    dialogues, windows, _, report = real
    for w in windows:
        foreign = [i for i, (d, _) in enumerate(w.turns) if d != w.dialogue]
        assert len(foreign) == w.label  # real: none; fake: exactly one turn
        own = [t for i, (_, t) in enumerate(w.turns) if i not in foreign]
        first = own[0] if not foreign or foreign[0] else own[0] - 1
        assert own == [first + i for i in range(len(w.turns)) if i not in foreign]
        if foreign:
            d, t = w.turns[foreign[0]]
            fake = dialogues[d][t][1].fields["input_ids"]
            replaced = dialogues[w.dialogue][first + foreign[0]][1].fields["input_ids"]
            same = len(fake) == len(replaced) and (fake == replaced).all()
            assert not same or report.reasons["dlm_fake_identical_turn_redrawn"]


def test_roles_alternate_as_the_turns_do(real):
    dialogues, windows, rows, _ = real
    starts_with_response = 0
    for w, row in zip(windows, rows, strict=True):
        first = min(t for d, t in w.turns if d == w.dialogue)
        first -= next(i for i, (d, _) in enumerate(w.turns) if d == w.dialogue)
        assert w.roles == [(first + i) % 2 for i in range(len(w.turns))]
        starts_with_response += w.roles[0]
        n = row["attention_mask"].sum()
        seps = np.flatnonzero(row["input_ids"][:n] == SEP)
        assert len(seps) == len(w.turns) >= 2
        bounds = np.r_[1, seps + 1]  # [CLS] is type 0 whoever speaks first, as in BERT
        assert row["token_type_ids"][0] == 0
        for role, a, b in zip(w.roles, bounds[:-1], bounds[1:], strict=True):
            assert (row["token_type_ids"][a:b] == role).all()
    assert 0.2 < starts_with_response / len(windows) < 0.8  # windows start at either speaker


def test_every_turn_is_used_once_and_records_hold_its_tokens(real):
    dialogues, windows, rows, report = real
    seen = {(d, t) for w in windows for i, (d, t) in enumerate(w.turns) if d == w.dialogue}
    total = sum(len(d) for d in dialogues)
    replaced = sum(w.label for w in windows)
    left = report.reasons["dialogue_last_turn_left_over"]
    assert len(seen) == total - replaced - left
    assert left < 0.01 * total
    for w, row in list(zip(windows, rows, strict=True))[::50]:
        ids = row["input_ids"][1 : row["attention_mask"].sum()]
        pieces = np.split(ids, np.flatnonzero(ids == SEP) + 1)[:-1]
        for (d, t), piece in zip(w.turns, pieces, strict=True):
            turn = dialogues[d][t][1].fields["input_ids"]
            body = piece[:-1]  # trimmed turns keep a contiguous run of their tokens
            k = len(body)
            assert 0 < k <= len(turn)
            assert any((turn[s : s + k] == body).all() for s in range(len(turn) - k + 1))


@pytest.fixture(scope="module")
def small_dialogues(tmp_path_factory):
    """60 dialogues from each source in the file: the pipeline path with ERNIE's fields."""
    lines = open(DIALOGUES, encoding="utf-8").read().splitlines()
    by_source = {}
    for line in lines:
        by_source.setdefault(json.loads(line)["source"].split()[0], []).append(line)
    path = tmp_path_factory.mktemp("dialogue") / "dialogues.jsonl"
    path.write_text("\n".join(x for v in by_source.values() for x in v[:60]) + "\n", "utf-8")
    return str(path)


def test_records_have_ernie_fields(small_dialogues):
    config = dlm_config()
    config.data.pack = False  # an instance a row (packed rows: tests/data/test_packing.py)
    assert config.data.fields == ("phrase_ids", "entity_ids")
    batch, report = pipeline.process_shard(text.Shard("dialogue", small_dialogues), config.data)
    check_common(config, batch)
    real = batch["attention_mask"].astype(bool) & (batch["input_ids"] != SEP)
    real[:, 0] = False
    for name in ("word_ids", "phrase_ids", "entity_ids"):
        check_units(np.where(real, batch[name], -1), real)
        assert (batch[name][~real] == -1).all()
    assert (batch["entity_ids"] >= 0).any() and (batch["phrase_ids"] >= 0).any()
    assert set(np.unique(batch["sentence_label"])) == {0, 1}
    assert report.counts["dialogues"] == 180
    assert report.counts["instances"] == len(batch["input_ids"])


def test_dialogue_source_needs_a_sentence_label(small_dialogues):
    config = dlm_config(format="full_sentences")
    with pytest.raises(ValueError, match="sentence_label"):
        pipeline.process_shard(text.Shard("dialogue", small_dialogues), config.data)


def test_dialogue_sources_need_a_sentence_head(tmp_path):
    """Without one the real/fake labels would be read by nothing: refused before any work."""
    from zhlm.train.loop import train_and_evaluate

    config = dlm_config()
    config.model.sentence_head = "none"
    with pytest.raises(ValueError, match="need a sentence head"):
        train_and_evaluate(config, str(tmp_path))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_dlm_config_mixes_text_and_dialogue_by_weight(small_dialogues, tmp_path):
    """The dlm recipe's two sources in one dataset; the loader draws them by its weights."""
    config = dlm_config()
    corpus = tmp_path / "text.txt"
    news = open(config.data.input[0].partition("=")[2], encoding="utf-8").read()
    corpus.write_text(news[: news.index("\n\n", 30_000) + 2], "utf-8")
    inputs = (f"train={corpus}", f"dialogue={small_dialogues}")
    builder.prepare(config.data, config.recipe, inputs, str(tmp_path / "data"), progress=False)
    loader = Loader(dataset_dir(str(tmp_path / "data"), config), config.data.mixture, 64, 0, 0, 1)
    plans = [loader.sampler.next_plan() for _ in range(100)]
    share = np.mean([name == "dialogue" for p in plans for name, _ in p])
    assert abs(share - 0.157) < 0.02, share
    batch = next(loader)
    assert set(batch) >= {"input_ids", "token_type_ids", "sentence_label", "entity_ids"}


@pytest.mark.slow
def test_dlm_config_pretrains_on_its_bundled_text_and_dialogues(tmp_path):
    """``configs/ernie.py:dlm`` as shipped (no ../shared), shortened as tests/train/test_loop.py
    shortens runs: both sources are held out and evaluated, and the loss falls."""
    from zhlm.train import metrics
    from zhlm.train.loop import train_and_evaluate

    config = dlm_config(max_seq_length=64)
    config.train.update(batch_size=8, num_steps=40, log_every=10, eval_every=20, eval_examples=16)
    config.optim.warmup_steps = 4
    t0, c0 = time.time(), time.process_time()
    train_and_evaluate(config, str(tmp_path))
    print(f"dlm config: {time.time() - t0:.1f} s wall, {time.process_time() - c0:.1f} s CPU")
    train = [line["loss"] for line in metrics.read(str(tmp_path))]
    evals = metrics.read(str(tmp_path), "eval")
    assert train[-1] < train[0] - 0.3, train
    assert len(evals) == 2 and all(np.isfinite(e["sentence_accuracy"]) for e in evals), evals
    per_source = ("train/sentence_accuracy", "dialogue/sentence_accuracy", "dlm_accuracy")
    assert all(k in e for e in evals for k in (*per_source, "nsp_accuracy")), evals[-1].keys()


@pytest.mark.slow
def test_dlm_real_fake_accuracy_rises_above_60_percent_on_held_out_dialogues(tmp_path):
    """``zhlm-pretrain --config=configs/ernie.py:dlm`` on the real dialogues, every tenth one
    held out whole (a weight-0 source: evaluation only, so none of its turns is trained on or
    drawn as a fake); then the trained model exported to Hugging Face judges the held-out
    windows as zhlm does, the roles read as token types and real/fake as NSP.

    Measured: this test at 1,200 steps, 72.7% and 68.6% while the shard seeds hashed the files'
    folder (a fresh tmp_path: other instances each run; at 800 steps five runs gave 59.4 to
    64.1%). They hash the file names now, so every run draws the same instances: 73.3% at
    1,200 steps; an 800-step schedule 59.2% at step 700 and 60.2% at 800, too near 60% to test.
    With these files and a 1,000-step schedule evaluated every 100 steps, held-out-dialogue
    accuracy 57.8, 62.5, 64.8 and 66.2% at steps 400 to 700 (68.6% at 800), level with held-out
    windows of the trained dialogues (55.3 to 70.1%), so it generalises rather than remembers.
    At the recipe's 1e-3 one run of four (seed 0, a 1,000-step schedule) never left the
    unigram stage (MLM accuracy 3%, real/fake at chance at step 800), hence half of it here.
    What it learns first is which corpus a turn comes from: with KdConv alone (one corpus, a
    third of the turns) a 1e-3 run that did leave the unigram stage was still at chance (48.6%)
    at step 800."""
    import torch
    import transformers

    import zhlm
    from zhlm.data import cache
    from zhlm.models.build import build_model
    from zhlm.train import checkpoint, metrics

    lines = open(DIALOGUES, encoding="utf-8").read().splitlines()
    train, held = tmp_path / "train.jsonl", tmp_path / "held.jsonl"
    train.write_text("\n".join(x for i, x in enumerate(lines) if i % 10 != 9) + "\n", "utf-8")
    held.write_text("\n".join(x for i, x in enumerate(lines) if i % 10 == 9) + "\n", "utf-8")
    workdir, steps = tmp_path / "dlm", DLM_STEPS
    flags = dict(
        input=f"('dialogue={train}','heldout={held}')",
        dialogue_sources="('dialogue','heldout')",
        mixture="dialogue:1,heldout:0",
        max_seq_length=64,
    )
    cmd = [sys.executable, "-m", "zhlm.cli.pretrain", f"--config={ROOT}/configs/ernie.py:dlm"]
    cmd += [f"--workdir={workdir}", *(f"--config.data.{k}={v}" for k, v in flags.items())]
    cmd += [f"--config.train.{k}={steps}" for k in ("num_steps", "eval_every", "checkpoint_every")]
    cmd += ["--config.train.eval_examples=512", "--config.optim.warmup_steps=200"]
    cmd += ["--config.optim.peak_lr=5e-4"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=without_opt_level_zero())
    assert run.returncode == 0, run.stderr[-3000:]
    (last,) = metrics.read(str(workdir), "eval")
    print({k: round(v, 3) for k, v in last.items() if "sentence_accuracy" in k})
    assert last["heldout/sentence_accuracy"] > 0.6, last

    loaded = checkpoint.load(str(workdir))
    model = build_model(loaded.config)
    zhlm.to_hf(model, {"params": loaded.params}, loaded.config, str(tmp_path / "hf"))
    hf = transformers.ErnieForPreTraining.from_pretrained(str(tmp_path / "hf")).eval()
    path = cache.ensure_dataset(loaded.config, progress=False)
    loader = Loader(path, "dialogue:1,heldout:0", 32, 0, 0, 1, holdout=512)
    _, batch = next(b for b in loader.eval_batches() if b[0] == "heldout")
    ids, types, mask = (batch[k] for k in ("input_ids", "token_type_ids", "attention_mask"))
    assert set(np.unique(types)) == {0, 1}  # both roles
    ours = np.asarray(model.apply({"params": loaded.params}, ids, types, mask)["sentence_logits"])
    with torch.no_grad():
        theirs = hf(*(torch.tensor(x, dtype=torch.long) for x in (ids, mask, types)))
    error = np.abs(ours - theirs.seq_relationship_logits.numpy()).max()
    assert error < 1e-4, error
    # Each packed instance's real/fake prediction against its own label (-1: an empty slot).
    slots = {k: batch[k] for k in ("segment_ids", "instance_starts") if k in batch}
    guess = model.apply({"params": loaded.params}, ids, types, mask, **slots)["sentence_logits"]
    labels = batch["sentence_label"]
    assert (np.asarray(guess).argmax(-1) == labels)[labels >= 0].mean() > 0.5


class _FakeLoader:
    """Held-out records of two sources as ``zhlm.data.loader.Loader`` lays them out: each
    row's ``correct`` says whether the fake model judges it right."""

    def __init__(self, held, sizes, correct, global_batch=4):
        self.held, self.sizes, self.global_batch = held, sizes, global_batch
        self.rows, self.correct = slice(0, global_batch), correct

    def eval_batches(self):  # the real method, over this layout
        from zhlm.data.loader import Loader

        return Loader.eval_batches(self)

    def _read(self, plan):
        return {
            "source": np.array([0 if name == "dialogue" else 1 for name, _ in plan], np.int32),
            "correct": np.array([self.correct[name](i) for name, i in plan], np.int32),
        }


class _FakeTrainer:
    def __init__(self, config):
        from zhlm.train import sharding

        self.mesh = sharding.create_mesh(config)

    def evaluate(self, params, batch, rng):
        from zhlm.train import sums

        n = batch["correct"].shape[0]
        loss = 1.0 - batch["correct"].mean()
        return sums.objective("sentence", loss * n, float(n), correct=batch["correct"].sum())


def test_eval_reports_nsp_and_real_fake_accuracy_apart():
    """Held-out metrics are kept per source and objective, not blended into one
    ``sentence_accuracy`` (the text's NSP and the dialogues' real/fake accuracy differ), each
    from whole batches of its own records (leftovers count in the overall means only)."""
    from zhlm.train import loop

    config = dlm_config()
    config.train.batch_size = 4
    correct = {"dialogue": lambda i: int(i % 4 != 0), "train": lambda i: 0}  # 3/4 and 0
    loader = _FakeLoader({"dialogue": 10, "train": 6}, {"dialogue": 40, "train": 100}, correct)
    sources = [s for s, _ in loader.eval_batches()]
    assert sources == ["dialogue", "dialogue", "train", None]  # leftovers 2 + 2 pooled
    metrics = loop._Evaluator(_FakeTrainer(config), loader, config)(params=None)
    assert metrics["dialogue/sentence_accuracy"] == pytest.approx(0.75)
    assert metrics["train/sentence_accuracy"] == 0.0
    assert metrics["dlm_accuracy"] == pytest.approx(0.75)
    assert metrics["nsp_accuracy"] == 0.0
    # The contract's names still cover every evaluated row: 8 dialogue rows (6 right), 4 text
    # rows, and the pooled 2 + 2 (of dialogue rows 48 and 49, one right).
    assert metrics["sentence_accuracy"] == pytest.approx((6 + 0 + 1) / 16)
    text_only = dlm_config(dialogue_sources=()).data
    assert loop._by_objective({"train": {"sentence_count": 4}}, text_only) == {}


def test_windows_are_three_turn_conversations(real):
    """ERNIE 1.0's DLM inputs are three-turn conversations (QRQ, QRR, QQR); a window never
    leaves a lone turn behind it when it could give one up."""
    _, windows, _, report = real
    counts = collections.Counter(len(w.turns) for w in windows)
    assert set(counts) == {2, 3} and counts[3] > 2 * counts[2], counts
    assert report.reasons["dialogue_last_turn_left_over"] < 0.01 * len(windows)
