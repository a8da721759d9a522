"""Tests of the task data readers on the real shared files and on one small bad file per error."""

import collections
import json
import os

import pytest
from helpers import ROOT, read_task

from zhlm.finetune import kinds as registry
from zhlm.finetune import task_files
from zhlm.finetune.readers import report as r
from zhlm.finetune.readers.squad import MrcAnswer, read_squad
from zhlm.finetune.readers.tables import read_table

DATA = os.path.join(ROOT, "..", "shared", "data")
BINARY = ("0", "1")
NLI = ("entailment", "neutral", "contradiction")

OCNLI_FIELDS = ("sentence1", "sentence2")  # the two texts of OCNLI and CLUE pair files


def data(*parts):
    return os.path.join(DATA, *parts)


@pytest.mark.parametrize("split, size", [("train", 9600), ("dev", 1200), ("test", 1200)])
def test_chnsenticorp(split, size):
    examples, report = read_table(data("chnsenticorp", f"{split}.tsv"), "tsv", labels=BINARY)
    assert report.ok and report.records == len(examples) == size
    assert {e.label for e in examples} == set(BINARY)
    # The header row was recognised, so the first record is on line 2.
    assert examples[0].line == 2 and examples[0].guid == f"{split}.tsv:2"
    assert all(e.text.strip() for e in examples)


def test_lcqmc():
    examples, report = read_table(data("lcqmc", "dev.txt"), "tsv", 2, labels=BINARY)
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
    examples, report = read_table(data("ocnli", name), "jsonl", 2, OCNLI_FIELDS, "label", NLI)
    assert len(examples) == kept and report.counts == {r.NO_GOLD_LABEL: unlabeled}
    assert report.dropped == unlabeled and kept + unlabeled == (
        3000 if name == "dev.json" else 10000
    )
    with open(data("ocnli", name), encoding="utf-8") as f:
        lines = f.read().splitlines()
    for issue in report.issues:  # each names the line whose label is '-'
        assert json.loads(lines[issue.line - 1])["label"] == "-"
    everything, report = read_table(
        data("ocnli", name), "jsonl", 2, OCNLI_FIELDS, "label", NLI, require_label=False
    )
    assert report.ok and sum(e.label is None for e in everything) == unlabeled
    assert everything[0].guid == str(json.loads(lines[0])["id"])  # OCNLI's own id field


def _check_located(examples):
    for example in examples:
        for answer in example.located_answers:
            assert example.context[answer.start :].startswith(answer.text)


def test_cmrc2018_dev():
    path = data("cmrc2018", "cmrc2018_dev.json")
    examples, report = read_squad(path)
    assert len(examples) == 3219 and report.dropped == 0
    assert report.counts == {r.ANSWER_NOT_FOUND: 193, r.ANSWER_REPAIRED: 7}
    _check_located(examples)
    assert all(e.located_answers for e in examples)
    assert sum(len(e.answers) for e in examples) == 9657  # unlocated answers are kept too
    first = examples[0]
    assert (first.qid, first.context_id, first.line) == ("DEV_0_QUERY_0", "DEV_0", 11)
    assert first.answers[0] == MrcAnswer("光荣和ω-force", 11)
    # Every issue names the line that shows the offending answer's text.
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    for issue in report.issues:
        assert '"text"' in lines[issue.line - 1]
    repaired = [i for i in report.issues if i.kind == r.ANSWER_REPAIRED]
    assert "answer_start 175 -> 174" in repaired[0].message


def test_cmrc2018_trial():
    examples, report = read_squad(data("cmrc2018", "cmrc2018_trial.json"))
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
    examples, report = read_table(path, "tsv", labels=BINARY)
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
    examples, report = read_table(path, "tsv", 1, (1,), 0, ("体育", "财经"))
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
    examples, report = read_table(path, "tsv", 2, labels=BINARY)
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
    examples, report = read_table(path, "tsv", 2, labels=NLI)
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
    examples, report = read_table(path, "jsonl", 2, OCNLI_FIELDS, "label", NLI)
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
    assert report.issues[1].message == "invalid JSON: Expecting value at column 33"
    path = write(tmp_path, "cut.json", lines[0] + '\n{"sentence1": "甲", "sentence2": "乙\n')
    _, report = read_table(path, "jsonl", 2, OCNLI_FIELDS, "label", NLI)
    assert report.issues[0].message == "invalid JSON: Unterminated string starting at column 33"


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
    examples, report = read_squad(path)
    by_id = {e.qid: e for e in examples}
    assert list(by_id) == ["ok", "off_by_one", "nearest", "absent", "none_found", "last"]
    assert by_id["off_by_one"].answers == (MrcAnswer("大学在", 2),)
    assert by_id["nearest"].answers == (MrcAnswer("北京大学", 8),)
    assert by_id["absent"].answers == (MrcAnswer("上海", None), MrcAnswer("北京", 0))
    assert by_id["absent"].located_answers == (MrcAnswer("北京", 0),)
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
    examples, report = read_squad(path, require_answers=False)
    assert "no_answers" in {e.qid for e in examples} and r.NO_ANSWER not in report.counts


def test_squad_not_json_or_not_squad(tmp_path):
    path = write(tmp_path, "broken.json", '{\n  "data": [\n    {"paragraphs": [}\n  ]\n}\n')
    examples, report = read_squad(path)
    assert examples == [] and kinds(report) == [(3, r.MALFORMED_LINE)]
    path = write(tmp_path, "latin1.json", '{"data": [\n"caf\xe9"]}'.encode("latin-1"))
    examples, report = read_squad(path)
    assert examples == [] and kinds(report) == [(2, r.MALFORMED_LINE)]
    path = write(tmp_path, "list.json", "[]")
    examples, report = read_squad(path)
    assert examples == [] and kinds(report) == [(1, r.MISSING_FIELD)]


# --- every layout through one reader (zhlm.finetune.readers.tables) -------------------------


def task_config(path, kind="classification", fmt="tsv", labels=(), dev=None, **fields):
    """The task section of a fine-tuning config reading ``path`` (also as the dev file)."""
    from zhlm import defaults

    task = defaults.get_finetune_config("tiny").task
    task.update(kind=kind, format=fmt, labels=labels, train_file=str(path), **fields)
    task.dev_file = str(dev or path)
    return task


NEWS = "中华女子学院：本科层次仅1专业招男生\t3\n两天价网站背后重重迷雾\t10\n东5环海棠公社\t0\n"


def test_headerless_tsv_has_its_label_last_and_labels_are_inferred(tmp_path, capsys):
    path = write(tmp_path, "news.txt", NEWS)
    examples, report = read_table(path, "tsv")
    assert report.ok and [(e.label, e.line) for e in examples] == [("3", 1), ("10", 2), ("0", 3)]
    assert examples[0].text == "中华女子学院：本科层次仅1专业招男生"
    dev = write(tmp_path, "dev.txt", "新闻\t3\n另一条\t7\n")
    task = task_config(path, dev=dev)
    train, evaluation, reports = read_task(task)
    assert task.labels == ("0", "3", "10")  # numbers in numeric order, written back
    assert "labels of" in capsys.readouterr().out and len(train) == 3
    # The dev file's label outside the inferred set is reported and skipped.
    assert len(evaluation) == 1 and kinds(reports[1]) == [(2, r.UNKNOWN_LABEL)]


def test_csv_with_a_header_reads_by_name(tmp_path):
    path = write(tmp_path, "senti.csv", 'label,review\n1,很好，下次还来\n0,"差, 很差"\n')
    examples, report = read_table(path, "csv", labels=BINARY)
    assert report.ok and [(e.label, e.text, e.line) for e in examples] == [
        ("1", "很好，下次还来", 2),
        ("0", "差, 很差", 3),
    ]


def test_csv_with_bom_quotes_newlines_and_crlf(tmp_path):
    text = (
        "sentence1,sentence2,label\r\n"
        '"他说""好""，然后走了","一句, 带逗号",1\r\n'
        '"两行\r\n的问题",答,0\r\n'
        "\r\n"
        "只有两列,0\r\n"  # a field short: reported with its line
        "问,答,1\r\n"
    )
    path = write(tmp_path, "qm.csv", b"\xef\xbb\xbf" + text.encode())
    examples, report = read_table(path, "csv", 2, labels=BINARY)
    assert [(e.text_a, e.text_b, e.line) for e in examples] == [
        ('他说"好"，然后走了', "一句, 带逗号", 2),
        ("两行\r\n的问题", "答", 3),
        ("问", "答", 7),
    ]
    assert kinds(report) == [(6, r.MALFORMED_LINE)]
    assert "2 comma-separated fields, expected 3" in report.issues[0].message


def test_fields_by_position_and_by_name(tmp_path):
    path = write(tmp_path, "thucnews.txt", "体育\t姚明复出\n财经\t股市\t大涨\n")
    examples, _ = read_table(path, "tsv", text_fields=("1",), label_field="0")
    assert [(e.label, e.text) for e in examples] == [("体育", "姚明复出"), ("财经", "股市\t大涨")]
    assert read_table(path, "tsv", label_field="0")[0] == examples  # the text: the next column
    assert read_table(path, "tsv", text_fields=(1,))[0] == examples  # the label: the one left
    named = write(tmp_path, "named.tsv", "id\tq\ta\ty\n7\t问\t答\t1\n")
    (example,), _ = read_table(named, "tsv", 2, ("q,a",), "y")  # one flag, comma-split
    assert (example.guid, example.text_a, example.text_b, example.label) == ("7", "问", "答", "1")
    # Positions say nothing of a header: this one is found by its usual names, "q" is not one.
    path = write(tmp_path, "usual.tsv", "id\tquery1\tquery2\tlabel\n7\t问\t答\t1\n")
    (example,), _ = read_table(path, "tsv", 2, (1, 2), "3")
    assert (example.text_b, example.line) == ("答", 2)
    with pytest.raises(ValueError, match="no column 'answer'"):
        read_table(named, "tsv", 2, ("q", "answer"), "y")
    with pytest.raises(ValueError, match="reads 2 text"):
        read_table(named, "tsv", 2, ("q",), "y")


def test_json_lines_json_list_and_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"id": "a", "sentence": "好", "label": 1},
        {"id": "b", "sentence": "", "label": 0},  # empty text
        {"id": "c", "sentence": "坏", "label": None},  # no label
        {"id": "d", "sentence": "还行", "label": 0},
    ]
    jsonl = write(
        tmp_path, "t.jsonl", "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows)
    )
    listed = write(tmp_path, "t.json", json.dumps(rows, ensure_ascii=False, indent=1))
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    expected = [("a", "好", "1"), ("d", "还行", "0")]
    for path, fmt, lines in (
        (jsonl, "jsonl", (2, 3)),
        (listed, "json", (8, 13)),
        (parquet, "parquet", (2, 3)),
    ):
        examples, report = read_table(path, fmt)
        assert [(e.guid, e.text, e.label) for e in examples] == expected, fmt
        assert kinds(report) == [(lines[0], r.EMPTY_TEXT), (lines[1], r.MISSING_FIELD)], fmt
    examples, report = read_table(jsonl, "json")  # JSON lines read as one JSON value
    assert examples == [] and "format jsonl" in report.issues[0].message


def test_a_saved_datasets_folder(tmp_path):
    import datasets  # the test extra installs it: this runs in CI

    features = datasets.Features(
        {
            "premise": datasets.Value("string"),
            "hypothesis": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
        }
    )
    data = {
        "premise": ["他来了", "下雨", "晴"],
        "hypothesis": ["有人来", "天晴", "有太阳"],
        "label": [0, 2, -1],
    }
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(data, features=features)})
    splits.save_to_disk(str(tmp_path / "xnli"))
    task = task_config(tmp_path / "xnli" / "train", "pair", "datasets", NLI)
    train, _, (report, _) = read_task(task)
    assert [(e.text_a, e.label, e.line) for e in train] == [
        ("他来了", "entailment", 1),
        ("下雨", "contradiction", 2),
    ]
    assert kinds(report) == [(3, r.MISSING_FIELD)]  # ClassLabel -1: no label
    with pytest.raises(ValueError, match="holds the splits train: point at one"):
        read_task(task_config(tmp_path / "xnli", "pair", "datasets", NLI))


# --- layouts read the wrong way: the error says what the file looks like ---------------------


def test_a_csv_read_as_tsv_names_the_delimiter_and_the_flag(tmp_path):
    rows = ["label,review"] + [f"{i % 2},第{i}条评论" for i in range(12)]
    path = write(tmp_path, "senti.csv", "\n".join(rows) + "\n")
    with pytest.raises(ValueError) as error:
        read_task(task_config(path, labels=BINARY))
    message = str(error.value)
    assert "no record could be read as format tsv (malformed_line=13)" in message
    assert "comma-delimited, 2 columns, header ['label', 'review']" in message
    assert "--config.task.format=csv" in message and "--config.task.label_field=label" in message


def test_labels_in_another_column_name_it(tmp_path):
    labels = ("体育", "财经", "科技")
    path = write(
        tmp_path, "news.txt", "".join(f"{labels[i % 3]}\t第{i}条新闻\n" for i in range(12))
    )
    with pytest.raises(ValueError) as error:  # a label set given: every label is unknown
        read_task(task_config(path, labels=labels))
    assert "unknown_label=12" in str(error.value)
    assert "column 0 looks like labels (3 values: 体育, 科技, 财经)" in str(error.value)
    assert "--config.task.text_fields=1 --config.task.label_field=0" in str(error.value)
    with pytest.raises(ValueError, match="12 distinct labels in 12 records"):  # labels inferred
        read_task(task_config(path))


def test_a_header_whose_names_are_swapped_proposes_the_other_mapping(tmp_path):
    """The header says ``label`` over the texts: the hint goes by what the columns hold, not by
    the name that was just read."""
    rows = "".join(f"这是第{i}条很长很长很长很长很长的评论内容\t{i % 2}\n" for i in range(12))
    path = write(tmp_path, "swapped.tsv", "label\ttext_a\n" + rows)
    with pytest.raises(ValueError) as error:
        read_task(task_config(path, labels=BINARY))
    assert "column 'text_a' looks like labels (2 values: 0, 1)" in str(error.value)
    assert str(error.value).endswith(
        "try --config.task.format=tsv --config.task.text_fields=label "
        "--config.task.label_field=text_a"
    )
    with pytest.raises(ValueError) as error:  # labels inferred: one per row
        read_task(task_config(path))
    assert "12 distinct labels in 12 records" in str(error.value)
    assert "--config.task.text_fields=label --config.task.label_field=text_a" in str(error.value)


def test_a_gbk_file_is_named_as_not_utf8(tmp_path):
    path = write(
        tmp_path, "gbk.txt", "".join(f"第{i}条新闻\t{i % 2}\n" for i in range(12)).encode("gbk")
    )
    with pytest.raises(ValueError, match="malformed_line=12.*not UTF-8 text .GBK"):
        read_task(task_config(path))


def test_a_latin1_file_is_not_called_gbk_and_the_encodings_tried_are_named(tmp_path):
    rows = "".join(f"café crème n°{i}\t{i % 2}\n" for i in range(12)).encode("latin-1")
    path = write(tmp_path, "latin1.txt", rows)
    with pytest.raises(ValueError, match="neither UTF-8 nor GBK text .the encodings tried.: ") as e:
        read_task(task_config(path))
    assert "(GBK" not in str(e.value) and "iconv -f THAT -t UTF-8" in str(e.value)
    utf16 = write(tmp_path, "utf16.txt", "好评\t1\n".encode("utf-16"))
    with pytest.raises(
        ValueError, match="UTF-16 text, not UTF-8 .its BOM says so.: iconv -f UTF-16"
    ):
        read_task(task_config(utf16))


def test_a_files_report_is_printed_once(tmp_path, capsys, caplog):
    rows = ["label\ttext_a", "1\t好评", "7\t标签不在标签集里", "0\t差评"]
    path = write(tmp_path, "senti.tsv", "\n".join(rows) + "\n")
    task_files.read_file(registry.get("classification"), task_config(path, labels=BINARY), path)
    out, err = capsys.readouterr()
    everything = out + err + caplog.text
    assert everything.count(f"{path}:3: unknown_label") == 1
    assert everything.count(f"{path}: 2 records, 1 skipped") == 1


STREAMED = [("jsonl", "classification"), ("parquet", "pair"), ("tagged", "ner")]
STREAMED += [("spans_jsonl", "ner")]


@pytest.mark.parametrize("fmt, kind", STREAMED)
def test_a_stream_holds_a_piece_of_the_file_not_its_records(tmp_path, fmt, kind):
    """10,000 records of each format through ``task_files.stream_file``, one at a time: the peak
    of Python allocations stays under 1.5 MB, where the records read whole take 3 to 17 MB."""
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    n, text = 10000, "位置很好，服务也不错。"
    rows = [{"text": f"{text}{i}", "text_b": "好", "label": str(i % 2)} for i in range(n)]
    path = tmp_path / f"many.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt == "tagged":
        path.write_text("".join("".join(f"{c}\tO\n" for c in r["text"]) + "\n" for r in rows))
    else:  # CLUENER's label is a mapping of entities: spans_jsonl inputs to predict have none
        keep = ("text",) if fmt == "spans_jsonl" else ("text", "label")
        items = ({k: r[k] for k in keep} for r in rows)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items))
    task = task_config(path, kind, fmt, BINARY if kind != "ner" else ("O",))
    tracemalloc.start()
    try:
        examples, report = task_files.stream_file(
            registry.get(task.kind), task, str(path), require_label=False
        )
        count = sum(1 for _ in examples)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == report.records == n and report.ok
    assert peak < 1.5 * 2**20, f"{peak / 2**20:.1f} MB"


def test_task_checks_are_one_line_each(tmp_path):
    with pytest.raises(ValueError, match=r"^config.task.train_file is empty: pass"):
        task_files.check_task(registry.get("classification"), task_config(""))
    task = task_config(tmp_path / "x.tsv")
    task.dev_file = ""
    with pytest.raises(ValueError, match=r"^config.task.dev_file is empty: pass"):
        task_files.check_task(registry.get(task.kind), task)
    with pytest.raises(ValueError, match="has fixed fields"):
        task_files.check_task(
            registry.get("mrc"), task_config(tmp_path / "x.json", "mrc", "squad", label_field="y")
        )
    with pytest.raises(FileNotFoundError, match="x.tsv: no such file"):
        read_task(task_config(tmp_path / "x.tsv"))
