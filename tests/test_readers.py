"""Tests of the task data readers on the real shared files and on one small bad file per error."""

import collections
import json
import os

import pytest

from zhlm.finetune import readers as r

DATA = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data"
)
BINARY = ("0", "1")
NLI = ("entailment", "neutral", "contradiction")


def data(*parts):
    return os.path.join(DATA, *parts)


@pytest.mark.parametrize("split, size", [("train", 9600), ("dev", 1200), ("test", 1200)])
def test_chnsenticorp(split, size):
    examples, report = r.read_sentence_tsv(data("chnsenticorp", f"{split}.tsv"), BINARY)
    assert report.ok and report.records == len(examples) == size
    assert {e.label for e in examples} == set(BINARY)
    # The header row was recognised, so the first record is on line 2.
    assert examples[0].line == 2 and examples[0].guid == f"{split}.tsv:2"
    assert all(e.text.strip() for e in examples)


def test_lcqmc():
    examples, report = r.read_pair_tsv(data("lcqmc", "dev.txt"), BINARY)
    assert report.ok and len(examples) == 8802
    assert collections.Counter(e.label for e in examples) == {"0": 4400, "1": 4402}
    first = examples[0]
    assert (first.text_a, first.text_b, first.line) == (
        "开初婚未育证明怎么弄？",
        "初婚未育情况证明怎么开？",
        1,
    )


@pytest.mark.parametrize(
    "name, kept, unlabeled", [("dev.json", 2950, 50), ("train.10k.json", 9985, 15)]
)
def test_ocnli(name, kept, unlabeled):
    examples, report = r.read_pair_jsonl(data("ocnli", name), NLI)
    assert len(examples) == kept and report.counts == {r.NO_GOLD_LABEL: unlabeled}
    assert report.dropped == unlabeled and kept + unlabeled == (
        3000 if name == "dev.json" else 10000
    )
    with open(data("ocnli", name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for issue in report.issues:  # each names the line whose label is '-'
        assert json.loads(lines[issue.line - 1])["label"] == "-"
    everything, report = r.read_pair_jsonl(data("ocnli", name), NLI, require_label=False)
    assert report.ok and sum(e.label is None for e in everything) == unlabeled
    assert everything[0].guid == str(json.loads(lines[0])["id"])  # OCNLI's own id field


def _check_located(examples):
    for example in examples:
        for answer in example.located_answers:
            assert example.context[answer.start :].startswith(answer.text)


def test_cmrc2018_dev():
    path = data("cmrc2018", "cmrc2018_dev.json")
    examples, report = r.read_squad(path)
    assert len(examples) == 3219 and report.dropped == 0
    assert report.counts == {r.ANSWER_NOT_FOUND: 193, r.ANSWER_REPAIRED: 7}
    _check_located(examples)
    assert all(e.located_answers for e in examples)
    assert sum(len(e.answers) for e in examples) == 9657  # unlocated answers are kept too
    first = examples[0]
    assert (first.qid, first.context_id, first.line) == ("DEV_0_QUERY_0", "DEV_0", 11)
    assert first.answers[0] == r.MrcAnswer("光荣和ω-force", 11)
    # Every issue names the line that shows the offending answer's text.
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for issue in report.issues:
        assert '"text"' in lines[issue.line - 1]
    repaired = [i for i in report.issues if i.kind == r.ANSWER_REPAIRED]
    assert "answer_start 175 -> 174" in repaired[0].message


def test_cmrc2018_trial():
    examples, report = r.read_squad(data("cmrc2018", "cmrc2018_trial.json"))
    assert len(examples) == 1002 and report.counts == {r.ANSWER_REPAIRED: 5}
    _check_located(examples)


# --- one small bad file per error case -------------------------------------------------------


def write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def kinds(report):
    return [(issue.line, issue.kind) for issue in report.issues]


def test_sentence_tsv_errors(tmp_path):
    path = write(
        tmp_path,
        "bad.tsv",
        "label\ttext_a\n"
        "1\t好\n"
        "2\t标签不在集合里\n"  # unknown label
        "0\t\n"  # empty text
        "\t没有标签\n"  # missing label
        "0\n"  # one field only
        "\n"  # blank: not a record
        "0\t还\t有\t制表符\n",  # the text keeps its tabs
    )
    examples, report = r.read_sentence_tsv(path, BINARY)
    assert [(e.line, e.text) for e in examples] == [(2, "好"), (8, "还\t有\t制表符")]
    assert kinds(report) == [
        (3, r.UNKNOWN_LABEL),
        (4, r.EMPTY_TEXT),
        (5, r.MISSING_FIELD),
        (6, r.MALFORMED_LINE),
    ]
    assert report.records == 2 and report.dropped == 4
    assert f"{path}:3: unknown_label" in str(report.issues[0])
    assert "2 records, 4 skipped" in report.summary()


def test_headerless_classification_tsv(tmp_path):
    path = write(tmp_path, "thucnews.txt", "体育\t姚明复出\n财经\t股市大涨\n天气\t晴\n")
    examples, report = r.read_sentence_tsv(path, ("体育", "财经"))
    assert [e.label for e in examples] == ["体育", "财经"] and examples[0].line == 1
    assert kinds(report) == [(3, r.UNKNOWN_LABEL)]


def test_pair_tsv_errors(tmp_path):
    good = "开初婚未育证明怎么弄？\t初婚未育情况证明怎么开？\t1\n"
    text = (
        good
        + "只有一句\t1\n"  # a missing column
        + "a\tb\t1\textra\n"  # one column too many
        + "问\t\t0\n"  # empty second sentence
        + "问\t答\tyes\n"  # label outside the set
    )
    invalid_utf8 = b"\xff\xfe\t\xe5\t0\n"
    path = write(tmp_path, "bad.txt", text.encode() + invalid_utf8 + good.encode())
    examples, report = r.read_pair_tsv(path, BINARY)
    assert [e.line for e in examples] == [1, 7]
    assert kinds(report) == [
        (2, r.MALFORMED_LINE),
        (3, r.MALFORMED_LINE),
        (4, r.EMPTY_TEXT),
        (5, r.UNKNOWN_LABEL),
        (6, r.MALFORMED_LINE),
    ]
    assert "not UTF-8" in report.issues[-1].message


def test_pair_tsv_with_header(tmp_path):
    path = write(tmp_path, "xnli.tsv", "premise\thypo\tlabel\n他来了\t有人来了\tentailment\n")
    examples, report = r.read_pair_tsv(path, NLI)
    assert report.ok and examples[0].text_b == "有人来了" and examples[0].line == 2


def test_pair_jsonl_errors(tmp_path):
    rows = [
        {"sentence1": "甲", "sentence2": "乙", "label": "neutral"},
        {"sentence1": "甲", "label": "neutral"},  # missing field
        {"sentence1": "甲", "sentence2": "乙", "label": "maybe"},  # unknown label
        {"sentence1": "甲", "sentence2": "乙", "label": "-"},  # no gold label
        {"sentence1": "  ", "sentence2": "乙", "label": "neutral"},  # empty text
        {"sentence1": 3, "sentence2": "乙", "label": "neutral"},  # not a string
        ["not", "an", "object"],
    ]
    lines = [json.dumps(row, ensure_ascii=False) for row in rows]
    lines.insert(2, '{"sentence1": "甲", "sentence2": ')  # truncated JSON on line 3
    lines.append(json.dumps(rows[0], ensure_ascii=False))
    path = write(tmp_path, "bad.json", "\n".join(lines) + "\n")
    examples, report = r.read_pair_jsonl(path, NLI)
    assert [e.line for e in examples] == [1, 9]
    assert kinds(report) == [
        (2, r.MISSING_FIELD),
        (3, r.MALFORMED_LINE),
        (4, r.UNKNOWN_LABEL),
        (5, r.NO_GOLD_LABEL),
        (6, r.EMPTY_TEXT),
        (7, r.MALFORMED_LINE),
        (8, r.MALFORMED_LINE),
    ]
    assert "sentence2" in report.issues[0].message


def squad_file(tmp_path, paragraphs):
    dataset = {"version": "v1.0", "data": [{"title": "t", "paragraphs": paragraphs}]}
    return write(tmp_path, "squad.json", json.dumps(dataset, ensure_ascii=False, indent=2))


def qa(qid, *answers):
    return {
        "id": qid,
        "question": "问？",
        "answers": [{"text": t, "answer_start": s} for t, s in answers],
    }


def test_squad_errors(tmp_path):
    context = "北京大学在北京，北京大学很大。"
    path = squad_file(
        tmp_path,
        [
            {
                "id": "P0",
                "context": context,
                "qas": [
                    qa("ok", ("北京大学", 0)),
                    qa("off_by_one", ("大学在", 1)),  # at 2: repaired
                    qa("nearest", ("北京大学", 9)),  # occurs at 0 and 8: 8 is nearest
                    qa("absent", ("上海", 0), ("北京", 0)),  # one answer not in the context
                    qa("none_found", ("上海", 3)),  # kept: the metric still scores it
                    qa("no_answers"),  # dropped: nothing to train or score on
                    qa("ok", ("北京", 5)),  # duplicate id
                    {"question": "没有 id", "answers": []},
                ],
            },
            {"id": "P1", "context": "   ", "qas": [qa("empty_ctx", ("x", 0))]},
            {"id": "P2", "context": "上海", "qas": [qa("last", ("上海", 0))]},
        ],
    )
    examples, report = r.read_squad(path)
    by_id = {e.qid: e for e in examples}
    assert list(by_id) == ["ok", "off_by_one", "nearest", "absent", "none_found", "last"]
    assert by_id["off_by_one"].answers == (r.MrcAnswer("大学在", 2),)
    assert by_id["nearest"].answers == (r.MrcAnswer("北京大学", 8),)
    assert by_id["absent"].answers == (r.MrcAnswer("上海", None), r.MrcAnswer("北京", 0))
    assert by_id["absent"].located_answers == (r.MrcAnswer("北京", 0),)
    assert by_id["none_found"].located_answers == ()
    assert [k for _, k in kinds(report)] == [
        r.ANSWER_REPAIRED,
        r.ANSWER_REPAIRED,
        r.ANSWER_NOT_FOUND,
        r.ANSWER_NOT_FOUND,
        r.NO_ANSWER,
        r.DUPLICATE_ID,
        r.MISSING_FIELD,
        r.EMPTY_CONTEXT,
    ]
    assert report.dropped == 4 and report.counts[r.ANSWER_REPAIRED] == 2
    # Lines point into the file: the first repaired answer's text is on its line.
    lines = path.read_text("utf-8").splitlines()
    assert '"大学在"' in lines[report.issues[0].line - 1]
    assert '"empty_ctx"' in lines[report.issues[-1].line - 1]
    # A test set has no answers: keep such questions when asked to.
    examples, report = r.read_squad(path, require_answers=False)
    assert "no_answers" in {e.qid for e in examples} and r.NO_ANSWER not in report.counts


def test_squad_not_json_or_not_squad(tmp_path):
    path = write(tmp_path, "broken.json", '{\n  "data": [\n    {"paragraphs": [}\n  ]\n}\n')
    examples, report = r.read_squad(path)
    assert examples == [] and kinds(report) == [(3, r.MALFORMED_LINE)]
    path = write(tmp_path, "latin1.json", '{"data": [\n"caf\xe9"]}'.encode("latin-1"))
    examples, report = r.read_squad(path)
    assert examples == [] and kinds(report) == [(2, r.MALFORMED_LINE)]
    path = write(tmp_path, "list.json", "[]")
    examples, report = r.read_squad(path)
    assert examples == [] and kinds(report) == [(1, r.MISSING_FIELD)]
