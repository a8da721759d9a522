"""Tests of the CMRC 2018 metric: hand-computed cases, NLTK-equivalence cases, the CLI on dev."""

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT

from zhlm.cli import cmrc_eval
from zhlm.finetune.metrics import cmrc2018 as m

DEV = os.path.join(ROOT, "..", "shared", "data", "cmrc2018", "cmrc2018_dev.json")

# What NLTK 3.9.1's word_tokenize(text, preserve_line=True) returns (recorded from NLTK itself).
NLTK_TOKENS = {
    "michael jackson": ["michael", "jackson"],
    "1,000": ["1,000"],
    "3.14": ["3.14"],
    "20%": ["20", "%"],
    "$100": ["$", "100"],
    "u.s.": ["u.s", "."],
    "u.s. army": ["u.s.", "army"],
    "iphone 4s": ["iphone", "4s"],
    "don't": ["do", "n't"],
    "jackson's": ["jackson", "'s"],
    "the dogs' bones": ["the", "dogs", "'", "bones"],
    '"hello" world': ["``", "hello", "''", "world"],
    'hello "world"': ["hello", "``", "world", "''"],
    "(1998)": ["(", "1998", ")"],
    "no.1": ["no.1"],
    "a,b": ["a", ",", "b"],
    "10:30": ["10:30"],
    "cannot": ["can", "not"],
    "gonna": ["gon", "na"],
    "what?!": ["what", "?", "!"],
    "e-mail": ["e-mail"],
    "...": ["..."],
    "end. next": ["end.", "next"],
    "…": ["…"],
    "1.5.": ["1.5", "."],
    "[a]": ["[", "a", "]"],
    "<b>": ["<", "b", ">"],
    "a&b": ["a", "&", "b"],
    "#1": ["#", "1"],
    "@user": ["@", "user"],
    "'quoted'": ["'quoted", "'"],
    "rock'n'roll": ["rock'n'roll"],
    "tab\tsep": ["tab", "sep"],
    "2x3*4": ["2x3", "*", "4"],
    "i'm": ["i", "'m"],
    "we'll": ["we", "'ll"],
    "they're": ["they", "'re"],
}


@pytest.mark.parametrize("text", sorted(NLTK_TOKENS))
def test_word_tokenize_matches_nltk(text):
    assert m.word_tokenize(text) == NLTK_TOKENS[text]


def test_punctuation_list_is_the_official_one():
    # 33 official entries, one of them the two-character '……', which never matches a character.
    assert len(m.PUNCTUATION) == 32
    assert "…" not in m.PUNCTUATION and "-" in m.PUNCTUATION and "『" in m.PUNCTUATION
    assert "," not in m.PUNCTUATION and "." not in m.PUNCTUATION  # ASCII , and . are not in it


def test_cjk_range_is_the_official_one():
    assert m.is_cjk("\u4e00") and m.is_cjk("\u9fa5")
    assert not m.is_cjk("\u9fa6") and not m.is_cjk("\U00020000") and not m.is_cjk("ω")


@pytest.mark.parametrize(
    "text, remove, tokens",
    [
        ("《战国无双3》", False, ["《", "战", "国", "无", "双", "3", "》"]),
        ("《战国无双3》", True, ["战", "国", "无", "双", "3"]),
        # A removed mark does not end the Latin run: the official script gives 'ωforce'.
        ("光荣和ω-force", True, ["光", "荣", "和", "ωforce"]),
        ("光荣和ω-force", False, ["光", "荣", "和", "ω", "-", "force"]),
        ("Michael Jackson的歌", True, ["michael", "jackson", "的", "歌"]),
        ("2008年8月8日", True, ["2008", "年", "8", "月", "8", "日"]),
        ("约1,000米，3.14%", True, ["约", "1,000", "米", "3.14", "%"]),
        ("北京 大学", True, ["北", "京", "大", "学"]),
        ("好……", True, ["好", "……"]),  # the ellipsis is not official punctuation
        ("  U.S.  ", True, ["u.s", "."]),
        ("", True, []),
    ],
)
def test_mixed_segmentation(text, remove, tokens):
    assert m.mixed_segmentation(text, remove_punctuation=remove) == tokens


def test_longest_common_run_is_contiguous():
    assert m.longest_common_run(list("abcd"), list("xbcy")) == 2
    assert m.longest_common_run(list("abc"), list("axc")) == 1  # a subsequence LCS would say 2
    assert m.longest_common_run([], list("abc")) == 0


@pytest.mark.parametrize(
    "prediction, references, f1, em",
    [
        ("北京大学", ["北京大学"], 1.0, 1.0),
        # Punctuation is removed before both scores.
        ("「北京大学」。", ["北京大学"], 1.0, 1.0),
        # Contiguous run 北京 (or 大学) = 2: P 2/5, R 2/4 (bag-of-tokens F1 would be 8/9).
        ("北京的大学", ["北京大学"], 2 * 0.4 * 0.5 / 0.9, 0.0),
        # Latin words are one token each, lower-cased; 's is its own token: P 2/3, R 1.
        ("michael jackson's", ["Michael Jackson"], 0.8, 0.0),
        ("MICHAEL JACKSON", ["Michael Jackson"], 1.0, 1.0),
        # '1,000' and '1000' are different single tokens; only 米 matches: P 1/2, R 1/2.
        ("1000米", ["1,000米"], 0.5, 0.0),
        ("1,000米", ["1,000米"], 1.0, 1.0),
        # Max over references: the second gives P 1, R 1/2.
        ("北京", ["上海", "北京大学"], 2 / 3, 0.0),
        ("北京大学", ["北京", "北京大学"], 1.0, 1.0),
        # EM strips before removing punctuation, so a space before a removed mark survives.
        (" 北京大学 。", ["北京大学"], 1.0, 0.0),
        ("", ["北京大学"], 0.0, 0.0),
        # An empty prediction equals an all-punctuation reference for EM, as officially.
        ("", ["。"], 0.0, 1.0),
        ("北京", [], 0.0, 0.0),
    ],
)
def test_question_scores(prediction, references, f1, em):
    assert m.f1_score(prediction, references) == pytest.approx(f1)
    assert m.exact_match(prediction, references) == em


SQUAD_STYLE = {
    "version": "v1.0",
    "data": [
        {
            "title": "t",
            "paragraphs": [
                {
                    "id": "C0",
                    "context": "北京大学在北京。",
                    "qas": [
                        {"id": "Q0", "question": "哪?", "answers": [{"text": "北京大学"}]},
                        {"id": "Q1", "question": "哪?", "answers": [{"text": "北京"}]},
                        {"id": " Q2 ", "question": "哪?", "answers": [{"text": "在北京"}]},
                    ],
                }
            ],
        }
    ],
}
ORIGINAL = [
    {
        "context_id": "C0",
        "context_text": "北京大学在北京。",
        "qas": [
            {"query_id": "Q0", "query_text": "哪?", "answers": ["北京大学", "北大"]},
            {"query_id": "Q1", "query_text": "哪?", "answers": ["北京"]},
            {"query_id": "Q2", "query_text": "哪?", "answers": ["在北京"]},
        ],
    }
]


def test_load_references_both_layouts():
    assert m.load_references(SQUAD_STYLE) == [
        ("Q0", ["北京大学"]),
        ("Q1", ["北京"]),
        ("Q2", ["在北京"]),  # ids are stripped, as officially
    ]
    assert m.load_references(ORIGINAL)[0] == ("Q0", ["北京大学", "北大"])
    with pytest.raises(ValueError):
        m.load_references({"version": "v1.0"})


@pytest.mark.parametrize("dataset", [SQUAD_STYLE, ORIGINAL])
def test_evaluate_counts_unanswered_as_zero(dataset):
    # Q0 exact; Q1 "北京大学" vs "北京": P 1/2, R 1 -> 2/3, EM 0; Q2 unanswered.
    score = m.evaluate(m.load_references(dataset), {"Q0": "北京大学", "Q1": "北京大学"})
    assert score.total == 3 and score.skip == 1 and score.unanswered == ("Q2",)
    assert score.f1 == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert score.em == pytest.approx(100 / 3)
    assert score.official_dict("p.json") == {
        "AVERAGE": "44.444",
        "F1": "55.556",
        "EM": "33.333",
        "TOTAL": 3,
        "SKIP": 1,
        "FILE": "p.json",
    }


def test_evaluate_edge_cases():
    # Non-string predictions go through str(), as in the official script.
    assert m.evaluate([("Q", ["1998"])], {"Q": 1998}).em == 100.0
    # A repeated id counts twice in TOTAL.
    assert m.evaluate([("Q", ["a"]), ("Q", ["a"])], {"Q": "a"}).total == 2
    assert m.evaluate([], {}).f1 == 0.0


def _dev_references():
    with open(DEV, encoding="utf-8") as f:
        dataset = json.load(f)
    return dataset, m.load_references(dataset)


def _run_cli(capsys, *argv):
    assert cmrc_eval.run([str(a) for a in argv]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def test_cli_on_dev_with_first_reference_is_perfect(tmp_path, capsys):
    _, references = _dev_references()
    predictions = tmp_path / "pred.json"
    predictions.write_text(json.dumps({qid: refs[0] for qid, refs in references}), "utf-8")
    result, err = _run_cli(capsys, DEV, predictions)
    assert result == {
        "AVERAGE": "100.000",
        "F1": "100.000",
        "EM": "100.000",
        "TOTAL": 3219,
        "SKIP": 0,
        "FILE": str(predictions),
    }
    assert err == ""


def test_cli_on_dev_perturbed(tmp_path, capsys):
    _, references = _dev_references()
    predictions = {qid: refs[0] for qid, refs in references}
    ids = [qid for qid, _ in references]
    # Scores unchanged: upper case, and official punctuation around a clean answer.
    for qid in ids[100:200]:
        if predictions[qid] == predictions[qid].strip():
            predictions[qid] = "《" + predictions[qid].upper() + "》。"
    for qid in ids[1:20]:  # unanswered: 0 each, counted in SKIP
        del predictions[qid]
    for qid in ids[20:40]:  # empty answers: 0 each
        predictions[qid] = ""
    # Partial credit, by hand: 光荣和ω-force is 光|荣|和|ωforce; 光荣 gives P 1, R 1/2.
    partial = dict(references)["DEV_0_QUERY_0"]
    assert partial == ["光荣和ω-force"] * 3
    predictions["DEV_0_QUERY_0"] = "光荣"
    path = tmp_path / "pred.json"
    path.write_text(json.dumps(predictions, ensure_ascii=False), "utf-8")
    result, err = _run_cli(capsys, DEV, path)
    full = 3219 - 19 - 20 - 1
    assert result["TOTAL"] == 3219 and result["SKIP"] == 19
    assert result["F1"] == f"{100 * (full + 2 / 3) / 3219:.3f}"
    assert result["EM"] == f"{100 * full / 3219:.3f}"
    assert err.count("Unanswered question: ") == 19


def test_cli_reads_the_original_cmrc_layout(tmp_path, capsys):
    dataset, references = _dev_references()
    original = [
        {
            "context_id": para["id"],
            "context_text": para["context"],
            "qas": [
                {
                    "query_id": qa["id"],
                    "query_text": qa["question"],
                    "answers": [a["text"] for a in qa["answers"]],
                }
                for qa in para["qas"]
            ],
        }
        for article in dataset["data"]
        for para in article["paragraphs"]
    ]
    data_path, pred_path = tmp_path / "original.json", tmp_path / "pred.json"
    data_path.write_text(json.dumps(original, ensure_ascii=False), "utf-8")
    pred_path.write_text(json.dumps({qid: refs[-1] for qid, refs in references}), "utf-8")
    result, _ = _run_cli(capsys, data_path, pred_path)
    assert (result["F1"], result["EM"], result["TOTAL"]) == ("100.000", "100.000", 3219)


def test_cli_reports_bad_input_without_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('["not", "a", "dict"]', "utf-8")
    assert cmrc_eval.run([DEV, str(bad)]) == 1
    assert "predictions must be a JSON object" in capsys.readouterr().err


def test_cli_as_a_module(tmp_path):
    data, pred = tmp_path / "d.json", tmp_path / "p.json"
    data.write_text(json.dumps(ORIGINAL, ensure_ascii=False), "utf-8")
    pred.write_text(json.dumps({"Q0": "北大", "Q1": "北京", "Q2": "在北京"}), "utf-8")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "zhlm.cli.cmrc_eval", str(data), str(pred)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    assert json.loads(out)["AVERAGE"] == "100.000"
