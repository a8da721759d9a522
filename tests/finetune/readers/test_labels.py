"""What a class label is (``zhlm.finetune.readers.labels``): equal numbers written two ways are
one label, in every table format, and said once; a label-names file (THUCNews' ``class.txt``,
TNEWS' and IFLYTEK's ``labels.json``) names the ids of the training and dev files, and one that
does not fit the data is refused in one line."""

import json
import os

import pytest
from helpers import DATA, read_task

from zhlm import defaults
from zhlm.errors import UserError
from zhlm.finetune import kinds, task_files
from zhlm.finetune.readers import report as r
from zhlm.finetune.readers.labels import LabelNames, Spelling, number_spelling

# THUCNews' class.txt: line i names label id i.
CLASSES = ["财经", "房产", "家居", "教育", "科技", "时尚", "时政", "体育", "游戏", "娱乐"]


def task_of(path, dev=None, **keys):
    """A classification task reading ``path`` (also as the dev file) with labels inferred."""
    task = defaults.get_finetune_config("tiny").task
    task.update(**{"labels": (), "train_file": str(path), "dev_file": str(dev or path), **keys})
    return task


def news(count=40, ids=None):
    """``(text, label id)`` of the first ``count`` THUCNews documents (a title's worth of each),
    the id the line of its class in :data:`CLASSES`, or ``ids[class]``."""
    rows = []
    with open(os.path.join(DATA, "thucnews_cnews", "cnews.val.txt"), encoding="utf-8") as f:
        for line in f:
            label, text = line.rstrip("\n").split("\t", 1)
            rows.append((text[:30], (ids or {}).get(label, str(CLASSES.index(label)))))
            if len(rows) == count:
                return rows
    return rows


# ------------------------------------------------------------------------- equal numbers


@pytest.mark.parametrize(
    "text, spelled",
    [("1", "1"), ("1.0", "1"), ("01", "1"), ("+1", "1"), ("-0.0", "0"), ("1e2", "100")]
    + [("0.50", "0.5"), (".5", "0.5"), ("-2.250", "-2.25"), ("１", None), ("1,0", None)]
    + [("pos", None), ("1e400", None), ("nan", None), ("", None)],
)
def test_a_number_has_one_spelling(text, spelled):
    assert number_spelling(text) == spelled


def test_equal_numbers_are_one_label_in_tsv_csv_and_json_lines(tmp_path, capsys):
    """1 and 1.0 (and 0, 0.0) in one file are two classes, not four: in a TSV, a CSV and JSON
    lines whose labels are strings or numbers. Each spelling read as another is reported once,
    kept, with the line it was first seen on."""
    reviews = [("1", "很好"), ("1.0", "不错"), ("0", "太差"), ("0.0", "一般般吧")] * 3
    files = {
        "tsv": "label\ttext_a\n" + "".join(f"{a}\t{b}\n" for a, b in reviews),
        "csv": "label,review\n" + "".join(f'"{a}",{b}\n' for a, b in reviews),
        "jsonl": "".join(
            json.dumps({"text": b, "label": v}, ensure_ascii=False) + "\n"
            for (a, b), v in zip(reviews, ["1", 1.0, 0, "0.0"] * 3, strict=True)
        ),
    }
    for fmt, content in files.items():
        path = tmp_path / f"reviews.{fmt}"
        path.write_text(content, encoding="utf-8")
        task = task_of(path, format=fmt, holdout=0.25, dev_file="")
        train, held, reports = read_task(task)
        assert task.labels == ("0", "1"), fmt
        assert {e.label for e in train + held} == {"0", "1"}
        assert len(train) + len(held) == len(reviews)
        respelled = [i for i in reports[0].issues if i.kind == r.LABEL_RESPELLED]
        assert all(not i.dropped for i in respelled) and reports[0].dropped == 0
        # JSON numbers are numbers: only the strings "0.0" are spelled anew.
        first = {"tsv": [3, 5], "csv": [3, 5], "jsonl": [4]}[fmt]
        assert [i.line for i in respelled] == first, fmt
        assert "'0.0' read as '0': equal numbers are one label" in str(respelled[-1])
        out = capsys.readouterr().out
        assert "(inferred, in this order): 0 (6), 1 (6)" in out, out


def test_given_labels_spell_their_numbers_and_may_not_name_one_twice(tmp_path):
    path = tmp_path / "reviews.tsv"
    path.write_text("label\ttext_a\n1\t很好\n0\t太差\n1.00\t不错\n", encoding="utf-8")
    train, _, _ = read_task(task_of(path, labels=("0.0", "1.0")))
    assert [e.label for e in train] == ["1.0", "0.0", "1.0"]
    assert Spelling(("neg", "pos"))("1.0") == "1"
    with pytest.raises(UserError, match=r"labels names one number twice \('1' and '1.0'\)"):
        read_task(task_of(path, labels=("0", "1", "1.0")))


def test_numbers_are_ordered_as_numbers_when_inferred(tmp_path):
    path = tmp_path / "scores.tsv"
    rows = [("10", "十"), ("2.5", "二点五"), ("-1", "负一"), ("2", "二"), ("b", "乙")] * 2
    path.write_text("".join(f"{b}\t{a}\n" for a, b in rows), encoding="utf-8")
    task = task_of(path)
    read_task(task)
    assert task.labels == ("-1", "2", "2.5", "10", "b")


# ------------------------------------------------------------------------ label names


def test_a_class_file_names_the_ids_of_the_training_and_dev_files(tmp_path, capsys):
    """THUCNews' layout: ``text<TAB>id`` lines and a class.txt. The labels become the names, in
    the class file's order (so output i is id i), for the training and the dev file, also
    when config.task.labels lists the ids."""
    classes = tmp_path / "class.txt"
    classes.write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    rows = news(60)
    train = tmp_path / "train.txt"
    train.write_text("".join(f"{t}\t{i}\n" for t, i in rows[:40]), encoding="utf-8")
    dev = tmp_path / "dev.txt"
    dev.write_text("".join(f"{t}\t{i}.0\n" for t, i in rows[40:]), encoding="utf-8")
    task = task_of(train, dev, label_names=str(classes))
    examples, evaluation, _ = read_task(task)
    assert task.labels == tuple(CLASSES)
    assert [e.label for e in examples] == [CLASSES[int(i)] for _, i in rows[:40]]
    assert [e.label for e in evaluation] == [CLASSES[int(i)] for _, i in rows[40:]]
    assert f"(named by {classes}, in its order): 财经 (" in capsys.readouterr().out
    # The ids as config.task.labels (a shipped config lists its labels) become their names.
    task = task_of(train, dev, label_names=str(classes), labels=tuple(map(str, range(10))))
    read_task(task)
    assert task.labels == tuple(CLASSES)


def test_tnews_and_iflytek_label_files_name_their_ids(tmp_path):
    """TNEWS writes ``label_desc``, IFLYTEK ``label_des``; ids are strings or numbers."""
    tnews = tmp_path / "labels.json"
    tnews.write_text(
        '{"label": "100", "label_desc": "news_story"}\n{"label": "101", "label_desc": '
        '"news_culture"}\n\n{"label": "116", "label_desc": "news_game"}\n'
    )
    names = LabelNames.read(str(tnews))
    assert names.names == {"100": "news_story", "101": "news_culture", "116": "news_game"}
    assert names.name("116") == "news_game" and names.name("102") is None
    iflytek = tmp_path / "iflytek.json"
    with open(os.path.join(DATA, "fewclue", "iflytek", "test_public.json"), encoding="utf-8") as f:
        pairs = {(r["label"], r["label_des"]) for r in map(json.loads, f)}
    iflytek.write_text(
        "".join(
            json.dumps({"label": i, "label_des": d}, ensure_ascii=False) + "\n"
            for i, d in sorted(pairs)
        )
    )
    names = LabelNames.read(str(iflytek))
    assert len(names.names) == len(pairs) and names.name("0") == dict(pairs)[0]


@pytest.mark.parametrize(
    "content, message",
    [
        ("", r"names no labels: give a name a line, or JSON lines"),
        ("财经\n\n房产\n", r"class.txt:2 is blank: a names file gives the name of id i on line i"),
        ("财经\n房产\n财经\n", r"class.txt:3: name '财经' given to ids '0' and '2': two ids"),
        ("1\n0\n", r"class.txt:1: name '1' of id '0' is also an id: names must differ"),
        ('{"label": "1", "label_desc": "a"}\n{"label": "1.0", "label_desc": "b"}\n', r":2: id "),
        ('{"label": "1", "label_desc": "a"}\n{"label": "2"}\n', r'class.txt:2 is not \{"label"'),
        ('{"id": 1}\n', r'class.txt:1 is not \{"label": ID, "label_desc": NAME\}'),
        (b"\xb2\xc6\xbe\xad\n", r"class.txt: not UTF-8 text; iconv -f GBK -t UTF-8"),
    ],
)
def test_a_names_file_that_would_merge_or_split_labels_is_refused(tmp_path, content, message):
    path = tmp_path / "class.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(UserError, match=message):
        LabelNames.read(str(path))


def test_a_label_the_names_file_lacks_is_refused_in_one_line(tmp_path):
    """A 1-based class file, or another dataset's: the first id it does not name stops the
    run with the file and line, never a class named by position."""
    classes = tmp_path / "class.txt"
    classes.write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    train = tmp_path / "train.txt"
    rows = news(20, ids={c: str(i + 1) for i, c in enumerate(CLASSES)})  # ids 1 to 10
    train.write_text("".join(f"{t}\t{i}\n" for t, i in rows), encoding="utf-8")
    line = 1 + [i for _, i in rows].index("10")
    with pytest.raises(UserError) as error:
        read_task(task_of(train, label_names=str(classes)))
    assert str(error.value) == (
        f"{train}:{line}: label '10' has no name in {classes} (it names 10 ids: 0, 1, 2, 3, 4, "
        "... 9): give the names file of this data"
    )
    with pytest.raises(UserError, match=r"labels: 'x' is neither an id nor a name in .*class.txt"):
        read_task(task_of(train, label_names=str(classes), labels=("1", "x")))
    with pytest.raises(UserError, match=r"label_names=.*nowhere.txt: no such file"):
        read_task(task_of(train, label_names=str(tmp_path / "nowhere.txt")))


def test_label_names_apply_only_to_kinds_with_label_ids(tmp_path):
    task = task_of(tmp_path / "train.txt", kind="ner", format="tagged", label_names="class.txt")
    with pytest.raises(UserError, match="kind ner has no label ids to name .classification"):
        task_files.check_task(kinds.get("ner"), task)
    task = task_of(tmp_path / "t.tsv", kind="regression", label_names="class.txt")
    with pytest.raises(UserError, match="kind regression has no label ids to name"):
        task_files.check_task(kinds.get("regression"), task)


@pytest.mark.slow
def test_named_labels_are_the_classes_of_results_predictions_and_exports(tmp_path):
    """THUCNews titles with their ids and class.txt, through the commands: the run prints the
    names with their counts, results.json scores each class by name, zhlm-predict and
    zhlm.pipeline predict names, and the Hugging Face export's id2label is the class file."""
    import subprocess
    import sys

    from helpers import ROOT

    import zhlm

    classes = tmp_path / "class.txt"
    classes.write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    rows = news(200)
    train = tmp_path / "train.txt"
    train.write_text("".join(f"{t}\t{i}\n" for t, i in rows), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=ROOT)
    workdir = tmp_path / "news"
    cmd = [sys.executable, "-m", "zhlm.cli.finetune", f"--workdir={workdir}"]
    cmd += [f"--config={ROOT}/configs/finetune/chnsenticorp.py:tiny", "--config.task.labels=()"]
    cmd += [f"--config.task.train_file={train}", f"--config.task.label_names={classes}"]
    cmd += ["--config.task.dev_file=", "--config.task.holdout=0.2", "--config.train.epochs=1"]
    cmd += ["--config.task.max_seq_length=32", "--config.train.log_every=0"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = {name: [CLASSES[int(i)] for _, i in rows].count(name) for name in CLASSES}
    shown = ", ".join(f"{name} ({counts[name]})" for name in CLASSES)
    assert f"labels of {train} (named by {classes}, in its order): {shown}\n" in done.stdout
    results = json.loads((workdir / "results.json").read_text())
    assert [k for k in results["seeds"][0] if k.startswith("f1/")] == [f"f1/{c}" for c in CLASSES]

    texts = tmp_path / "titles.txt"
    texts.write_text("".join(t + "\n" for t, _ in rows[:5]), encoding="utf-8")
    out = tmp_path / "predicted.jsonl"
    cmd = [sys.executable, "-m", "zhlm.cli.predict", f"--workdir={workdir}"]
    done = subprocess.run(
        [*cmd, f"--input={texts}", f"--output={out}"], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert all(r["label"] in CLASSES and list(r["probabilities"]) == CLASSES for r in records)

    hf = tmp_path / "hf"
    cmd = [sys.executable, "-m", "zhlm.cli.convert", f"--input={workdir}", f"--output={hf}"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    id2label = json.loads((hf / "config.json").read_text(encoding="utf-8"))["id2label"]
    assert id2label == {str(i): name for i, name in enumerate(CLASSES)}
    result = zhlm.pipeline(str(hf))(rows[0][0])
    assert result["label"] == records[0]["label"]
    assert result["probabilities"] == pytest.approx(records[0]["probabilities"], abs=1e-5)
