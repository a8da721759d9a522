"""MRC: windows and answer spans on real CMRC 2018 data, and the n-best span search."""

import os

import numpy as np
import pytest
from helpers import DATA

from zhlm.finetune.kinds import mrc
from zhlm.finetune.readers import squad

CMRC_DEV = os.path.join(DATA, "cmrc2018", "cmrc2018_dev.json")


@pytest.fixture(scope="module")
def cmrc():
    examples, _ = squad.read_squad(CMRC_DEV)
    return examples


# --------------------------------------------------------------------------- MRC features


def test_windows_cover_the_context_and_answers_map_back(tokenizer, cmrc):
    """On the first 1,000 CMRC 2018 dev questions: every context token lies in a window and has
    exactly one max-context window; located answers map to token spans that cut out the answer
    text exactly. Measured here: 2,908 of 2,911 answers exact, all 2,911 up to surrounding
    whitespace (over all 3,219 questions: 9,448 of 9,464 exact; of the 16 others 14 differ by
    whitespace and 2 start inside a token, '4个' in '34个'). 6 first answers are longer than a
    128-token window can hold whole (none at the configs' 512)."""
    examples = cmrc[:1000]
    features = mrc.mrc_features(examples, tokenizer, 128, 64, 32)
    contexts = tokenizer.encode_batch([e.context for e in examples])
    exact = stripped = total = too_long = 0
    for index, (example, c) in enumerate(zip(examples, contexts, strict=True)):
        rows = np.flatnonzero(features.example_index == index)
        covered = np.zeros(len(c.ids), int)
        best = np.zeros(len(c.ids), int)
        for f in rows:
            inside = features.char_start[f] >= 0
            tokens = features.window_start[f] + np.arange(inside.sum())
            covered[tokens] += 1
            best[tokens] += features.max_context[f][inside]
            assert (features.char_start[f][inside] == c.starts[tokens]).all()
        assert (covered >= 1).all() and (best == 1).all()
        for answer in example.located_answers:
            span = mrc.answer_token_span(c.starts, c.ends, answer.start, len(answer.text))
            text = example.context[c.starts[span[0]] : c.ends[span[1]]]
            total += 1
            exact += text == answer.text
            stripped += text.strip() == answer.text.strip()
        # Labelled windows decode to the first answer's token span; the others point at [CLS].
        start, end = (features.arrays[k][rows] for k in ("start_position", "end_position"))
        first = example.located_answers[0]
        span = mrc.answer_token_span(c.starts, c.ends, first.start, len(first.text))
        for f, s, e in zip(rows, start, end, strict=True):
            if s == 0:
                assert e == 0
                continue
            assert (
                example.context[features.char_start[f, s] : features.char_end[f, e]]
                == (example.context[c.starts[span[0]] : c.ends[span[1]]])
            )
        # Windows start 64 tokens apart, so one holds any answer of up to room - 64 tokens.
        room = 128 - 3 - min(len(tokenizer.tokenize(example.question)), 32)
        if span[1] - span[0] < room - 64:
            assert (start > 0).any()
        else:
            too_long += not (start > 0).any()
    assert total > 2800
    print(f"answers mapped exactly {exact}/{total}, up to whitespace {stripped}/{total}")
    assert exact / total >= 0.997 and stripped / total >= 0.999
    print(f"first answers longer than any window can hold whole: {too_long}")
    assert too_long <= 6


def test_an_answer_straddling_two_windows_is_labelled_where_it_fits(tokenizer):
    context = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉"  # one token per character
    answer = squad.MrcAnswer("壬癸子丑", 8)  # tokens 8..11
    example = squad.MrcExample("q", "问", context, (answer,), "", "c", 1)
    # [CLS] 问 [SEP] + 10 context tokens + [SEP]: windows [0,10), [4,14), [8,18), [12,20)
    features = mrc.mrc_features([example], tokenizer, 14, 4, 8)
    assert features.window_start.tolist() == [0, 4, 8, 12]
    starts, ends = (features.arrays[k].tolist() for k in ("start_position", "end_position"))
    labels = list(zip(starts, ends, strict=True))
    assert labels == [(0, 0), (3 + 4, 3 + 7), (3 + 0, 3 + 3), (0, 0)]
    for f in (1, 2):
        s, e = labels[f]
        assert context[features.char_start[f, s] : features.char_end[f, e]] == "壬癸子丑"


# ------------------------------------------------------------------------- n-best search


def test_best_spans_respect_context_order_and_length():
    # [CLS] q q [SEP] c4 c5 c6 c7 c8 [SEP]: the highest logits sit on [CLS], question and [SEP].
    context = np.zeros(10, bool)
    context[4:9] = True
    start = np.array([9.0, 8, 8, 7, 1, 5, 0, 0, 0, 9])
    end = np.array([9.0, 8, 8, 7, 6, 0, 3, 4, 0, 9])
    best = mrc.best_spans(start, end, context, context, n_best_size=20, max_answer_length=30)
    # (5, 4) would score 11 but ends before it starts; (5, 7) scores 5 + 4.
    assert best[0] == (9.0, 5, 7)
    assert all(4 <= i <= j <= 8 for _, i, j in best)
    assert [score for score, _, _ in best] == sorted((score for score, _, _ in best), reverse=True)
    # max_answer_length=2 forbids the three-token (5, 7): (5, 6) scores 8, (4, 4) only 7.
    assert mrc.best_spans(start, end, context, context, 20, 2)[0] == (8.0, 5, 6)
    # Only the n_best_size best starts and ends are paired: with one each, (5, 4) is all there
    # is and it is invalid; with two, (5, 7) is found again.
    assert mrc.best_spans(start, end, context, context, 1, 30) == []
    assert mrc.best_spans(start, end, context, context, 2, 30)[0] == (9.0, 5, 7)
    # A start that is not allowed (another window has more context for it) is never used.
    no_five = context.copy()
    no_five[5] = False
    assert mrc.best_spans(start, end, no_five, context, 20, 30)[0] == (7.0, 4, 4)


def test_predict_answers_takes_the_best_window(tokenizer):
    context = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉"
    example = squad.MrcExample("q", "问", context, (), "", "c", 1)
    features = mrc.mrc_features([example], tokenizer, 14, 4, 8)
    start = np.full((4, 14), -5.0)
    end = np.full((4, 14), -5.0)
    start[0, 3 + 1], end[0, 3 + 2] = 2.0, 2.0  # window 0: 乙丙, score 4
    start[2, 3 + 5], end[2, 3 + 6] = 3.0, 3.0  # window 2: tokens 13..14 = 卯辰, score 6
    start[1, 0] = end[1, 0] = 50.0  # [CLS] is never an answer
    answers = mrc.predict_answers(features, [example], start, end, 20, 30)
    assert answers == {"q": "卯辰"}


# ------------------------------------------------------------------- answers not located


@pytest.mark.slow
def test_questions_without_a_located_answer_leave_training_and_stay_in_the_dev_score(tmp_path):
    """Through the command: a question none of whose answers is in its context is kept (the
    report says so), left out of training (the run says how many, results.json counts it in
    ``left_out_of_training``) and still scored against its answer text in the dev set."""
    import json
    import subprocess
    import sys

    from helpers import ROOT

    def qa(qid, question, text):
        return {"id": qid, "question": question, "answers": [{"text": text, "answer_start": 0}]}

    paragraphs = [
        {"id": "p0", "context": "北京是中国的首都。", "qas": [qa("q0", "首都是哪里？", "北京")]},
        {"id": "p1", "context": "上海在东部。", "qas": [qa("q1", "哪里在东部？", "广州")]},
        {"id": "p2", "context": "长江很长。", "qas": [qa("q2", "什么很长？", "长江")]},
    ]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": paragraphs}]}, indent=1))
    workdir = tmp_path / "mrc"
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", f"--workdir={workdir}"]
    cmd += [f"--config={ROOT}/configs/finetune/cmrc2018.py:tiny", "--config.train.epochs=1"]
    cmd += [f"--config.task.{key}={path}" for key in ("train_file", "dev_file")]
    cmd += ["--config.task.holdout=0", "--config.task.max_seq_length=32"]
    cmd += ["--config.task.doc_stride=16", "--config.task.max_query_length=8"]
    cmd += ["--config.train.save_best=False", "--config.train.log_every=0"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{path}: 3 records, 0 skipped [answer_not_found=1]" in done.stdout
    assert (
        "answer_not_found: '广州' does not occur in its context (answer_start 0): no span to "
        "train on, still scored (kept)"
    ) in done.stdout
    assert (
        "zhlm-finetune: 1 of 3 training questions left out of training: none of their answers "
        "is in their context (answer_not_found above); dev questions like them still count in "
        "the score"
    ) in done.stdout
    results = json.loads((workdir / "results.json").read_text())
    assert results["left_out_of_training"] == 1 and results["train_examples"] == 2
    assert results["eval_examples"] == 3 and results["skipped"] == {str(path): 0}
    scored = json.loads((workdir / "eval_set.json").read_text())
    questions = [q["id"] for a in scored["data"] for p in a["paragraphs"] for q in p["qas"]]
    assert questions == ["q0", "q1", "q2"]
    assert set(json.loads((workdir / "predictions_dev.json").read_text())) == set(questions)
