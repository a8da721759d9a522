"""ERNIE 1.0's dialogue language model (DLM): multi-turn dialogues to real/fake instances.

Why it is only data: ERNIE 1.0 (Sun et al., 2019, section 3.3) feeds dialogues through the same
encoder, with a dialogue embedding that "plays the same role as the token type embedding", MLM
on the dialogue and a judgement whether the conversation is real or fake. So a DLM instance is
an ordinary record of the recipe's dataset (the same per-token fields as its text, so knowledge
masking applies unchanged) whose ``token_type_ids`` are the speakers' roles and whose
``sentence_label`` is the real/fake label, read by the same 2-way sentence head as NSP, as the
released ERNIE 1.0 did (one ``next_sentence_label`` for its encyclopedia, news and forum data).

Instances (``[CLS] T1 [SEP] T2 [SEP] ... Tk [SEP]``, k >= 2):

* Sources named in ``data.dialogue_sources`` are JSON lines ``{"turns": ["...", ...]}``; turns
  alternate between two speakers, the first one opening the dialogue.
* A dialogue is cut into windows of two or three consecutive turns (``MAX_TURNS``): a third
  turn joins when it fits the target length (BERT's ``short_seq_prob`` draws a shorter target,
  which only ever keeps a window at two turns: no record is cut to the target); a single turn
  left at the end of a dialogue is counted and dropped. Windows longer than the sequence are
  trimmed, the longest turn first.
  Three, not as many as fit: ERNIE's DLM inputs are three-turn conversations (QRQ, QRR, QQR)
  with the query or the response replaced in a fake. In windows filled to 128 tokens (4.1
  turns on average in ``dialogues.jsonl``, up to 11) the one replaced turn is a smaller share
  of the window. Tiny, dialogue-only, 4,000 steps of 32 from random init (before the
  lone-turn rule above): held-out real/fake accuracy 72% with filled windows against 77% with
  three-turn ones, and the filled windows overfit sooner (train 93% at 4,000 steps; held-out
  loss rising from 0.61 to 1.25 by 12,000 steps). Either way it stays near 50% until the MLM
  leaves the unigram stage (about 600 steps of 32 there), so runs of 1,200 steps of 16 or
  1,000 of 32 end at chance or barely above it.
* Role ids: turn ``t`` of a dialogue (0-based, in the file) has role ``t % 2`` (0 = Q, the
  opener's side; 1 = R), so roles alternate as the turns do, whichever turn a window starts at.
* Fake: with probability 1/2 (the data seed), one turn of the window, chosen uniformly, is
  replaced by a turn drawn uniformly from the other dialogues of the shard (never its own; a
  draw with the same tokens as the turn it replaces is drawn again). The replacement keeps the
  slot's role. ``sentence_label`` is 1 for fake and 0 for real: NSP's convention here (0 =
  IsNext, the text belongs together), so a mixed batch asks one question of the one head.
"""

import bisect
import dataclasses

from zhlm.data import text
from zhlm.errors import UserError

TURNS_FIELD = "turns"
MAX_TURNS = 3  # turns per window at most: ERNIE 1.0's QRQ / QRR / QQR (module docstring)
_REDRAWS = 8  # identical-turn redraws before the fake is kept anyway (counted)


@dataclasses.dataclass
class Window:
    """One DLM instance before layout: ``turns`` are ``(dialogue, turn)`` indices into the
    shard's dialogues, ``roles`` their role ids, ``label`` 1 fake / 0 real."""

    dialogue: int
    turns: list
    roles: list
    label: int


def read_dialogues(shard: text.Shard, data_config, report: text.Report, converter=None):
    """The shard's dialogues as lists of ``(role, sentences)`` turns, cleaned and split like
    text (a turn with nothing left is dropped, counted; the others keep their roles)."""
    if not shard.path.endswith((".jsonl", ".jsonl.gz")):
        raise UserError(f"dialogue source {shard.source!r}: {shard.path} is not JSON lines")
    for obj in text.json_objects(shard, report):
        turns = obj.get(TURNS_FIELD) if isinstance(obj, dict) else None
        if not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
            report.reason("bad_dialogue_line", message=f"{shard.path}: no list of text turns")
            continue
        dialogue = []
        for index, turn in enumerate(turns):
            cleaned = text.clean(turn, report, converter)
            sentences = text.split_sentences(cleaned, data_config.max_sentence_chars, report)
            if sentences:
                dialogue.append((index % 2, sentences))
            else:
                report.reason("dialogue_turn_empty")
        yield dialogue


def annotate(dialogues, ann, np_rng, report):
    """Each turn annotated as a document of its own (the writer renumbers units across turns),
    so a turn from another dialogue drops into a window like any other."""
    out = []
    for dialogue in dialogues:
        turns = []
        for role, sentences in dialogue:
            doc = ann.document(sentences, np_rng, report)
            if doc is not None:
                turns.append((role, doc))
        if len(turns) < 2:
            report.reason("dialogue_under_two_turns")
            continue
        out.append(turns)
        report.count("dialogues")
        report.count("turns", len(turns))
    return out


def _target(max_tokens, short_seq_prob, rng):
    # BERT's short targets, drawn as zhlm.data.instances draws them for text (a window's length).
    return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens


def _windows_of(dialogue, max_tokens, short_seq_prob, rng, report):
    """Windows of 2 to :data:`MAX_TURNS` consecutive turns of dialogue ``d`` (before any fake
    is drawn), as many as fit the target length; a window that would leave one turn alone at
    the end of the dialogue gives up its last turn to it."""
    n, i = len(dialogue), 0
    while i < n - 1:
        target = _target(max_tokens, short_seq_prob, rng)
        used = sum(dialogue[t][1].num_tokens + 1 for t in (i, i + 1))
        j = i + 2
        while j < min(n, i + MAX_TURNS) and used + dialogue[j][1].num_tokens + 1 <= target:
            used += dialogue[j][1].num_tokens + 1
            j += 1
        if j == n - 1 and j - i > 2:
            j -= 1
        yield list(range(i, j))
        i = j
    if i == n - 1:
        report.reason("dialogue_last_turn_left_over")


def _draw_fake(dialogues, d, replaced, firsts, total, rng, report):
    """A ``(dialogue, turn)`` drawn uniformly from the turns of every other dialogue."""
    own = len(dialogues[d])
    for _ in range(_REDRAWS):
        k = rng.randrange(total - own)
        k += own if k >= firsts[d] else 0  # skip this dialogue's block of turns
        other = _dialogue_of(firsts, k)
        turn = k - firsts[other]
        ids = dialogues[other][turn][1].fields["input_ids"]
        if len(ids) != len(replaced) or (ids != replaced).any():
            return other, turn
        report.reason("dlm_fake_identical_turn_redrawn")
    return other, turn


def _dialogue_of(firsts, k):
    return bisect.bisect_right(firsts, k) - 1


def plan(dialogues, max_tokens, short_seq_prob, rng, report):
    """All windows of a shard's annotated dialogues, each real or fake (see the module
    docstring); pure Python, so tests check the draws on real data directly."""
    firsts, total = [], 0
    for dialogue in dialogues:
        firsts.append(total)
        total += len(dialogue)
    for d, dialogue in enumerate(dialogues):
        for turns in _windows_of(dialogue, max_tokens, short_seq_prob, rng, report):
            roles = [dialogue[t][0] for t in turns]
            pairs = [(d, t) for t in turns]
            label = int(rng.random() < 0.5)
            if label and len(dialogues) < 2:
                report.reason("dlm_fake_impossible_single_dialogue_shard")
                label = 0
            if label:
                slot = rng.randrange(len(turns))
                replaced = dialogue[turns[slot]][1].fields["input_ids"]
                pairs[slot] = _draw_fake(dialogues, d, replaced, firsts, total, rng, report)
            yield Window(d, pairs, roles, label)


def _trim(lengths, budget, rng):
    """Per-turn ``(start, end)`` token ranges: the longest turn loses a token (front or back
    at random, as BERT truncates pairs) until the window fits ``budget``."""
    ranges = [[0, n] for n in lengths]
    over = sum(lengths) - budget
    while over > 0:
        r = max(ranges, key=lambda x: x[1] - x[0])
        if rng.random() < 0.5:
            r[0] += 1
        else:
            r[1] -= 1
        over -= 1
    return ranges


def write(window, dialogues, writer, rng):
    """The window laid out as one record (``writer``: a :class:`zhlm.data.instances.Writer`)."""
    docs = [dialogues[d][t][1] for d, t in window.turns]
    budget = writer.length - 1 - len(docs)  # [CLS] and one [SEP] per turn
    ranges = _trim([doc.num_tokens for doc in docs], budget, rng)
    segments = [[(doc, a, b)] for doc, (a, b) in zip(docs, ranges, strict=True)]
    return writer(segments, window.label, types=window.roles)


def check_heads(config) -> None:
    """A run with dialogue sources needs the sentence head that reads their real/fake label:
    without one the DLM would silently be MLM on dialogue text only."""
    if config.data.dialogue_sources and config.model.sentence_head == "none":
        raise UserError(
            f"data.dialogue_sources {tuple(config.data.dialogue_sources)} need a sentence head "
            "for the DLM's real/fake label (model.sentence_head nsp or sop), got 'none'"
        )


def shard_instances(shard, data_config, ann, writer, rngs, converter, report):
    """All DLM records of one dialogue shard (``zhlm.data.pipeline.process_shard`` calls it
    for the sources in ``data.dialogue_sources``)."""
    if data_config.format not in ("segment_pair", "sop"):
        raise UserError(
            f"data.dialogue_sources needs a format with sentence_label (segment_pair or sop) "
            f"for the real/fake label, got data.format={data_config.format!r}"
        )
    py_rng, np_rng = rngs
    turns = read_dialogues(shard, data_config, report, converter)
    dialogues = annotate(turns, ann, np_rng, report)
    max_tokens = writer.length - 1
    windows = plan(dialogues, max_tokens, data_config.short_seq_prob, py_rng, report)
    rows = [write(w, dialogues, writer, py_rng) for w in windows]
    report.count("dlm_fake", sum(int(r["sentence_label"]) for r in rows))
    return rows
