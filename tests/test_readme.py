"""README.md's "Your first hour" block, run as it is in a shell: only its four names at the top
are pointed at test inputs (a tiny random ``BertForPreTraining`` saved by transformers with
the Google vocabulary, a few hundred lines of the CLUE sample corpus, 240 ChnSentiCorp reviews
as a CSV) and its step count made small. Every command must exit 0, and their files must say
that each stage took the previous one's output."""

import csv
import json
import os
import re
import shutil
import subprocess

import pytest
from helpers import DATA, ROOT, hf_folder, without_opt_level_zero

from zhlm.data.tokenizer import default_vocab

NAMES = ("HF", "TEXT", "CSV", "STEPS")


def first_hour_block() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    section = readme.split("## Your first hour", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_the_block_sets_its_names_first():
    lines = first_hour_block().splitlines()
    assert [line.split("=")[0] for line in lines[: len(NAMES)]] == list(NAMES)


@pytest.mark.slow
def test_readme_first_hour_runs_as_written(tmp_path):
    _, hf = hf_folder(tmp_path, "BertForPreTraining")
    shutil.copy(default_vocab(), os.path.join(hf, "vocab.txt"))
    text = tmp_path / "my_text.txt"
    with open(os.path.join(DATA, "corpus", "clue_small_docs.txt"), encoding="utf-8") as f:
        text.write_text("".join(f.readlines()[:400]), encoding="utf-8")
    reviews = tmp_path / "reviews.csv"
    with open(os.path.join(DATA, "chnsenticorp", "train.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:241]
    with open(reviews, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows([[review, label] for label, review in rows])
    values = dict(HF=hf, TEXT=str(text), CSV=str(reviews), STEPS="5")
    lines = first_hour_block().splitlines()
    script = [f"{name}={values[name]}" for name in NAMES] + lines[len(NAMES) :]
    (tmp_path / "first").mkdir()
    env = dict(without_opt_level_zero(), ZHLM_CACHE=str(tmp_path / "cache"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(script)],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])

    first = tmp_path / "first"
    results = json.loads((first / "reviews" / "results.json").read_text(encoding="utf-8"))
    assert results["init_from"].startswith("first/pretrain") or "pretrain" in results["init_from"]
    assert results["eval_examples"] == 48  # 20% of 240, drawn within each label
    predictions = [json.loads(line) for line in open(first / "predictions.jsonl", encoding="utf-8")]
    assert [p["text"] for p in predictions] == ["房间很干净，服务周到", "等了一个小时才上菜"]
    assert all(p["label"] in ("0", "1") for p in predictions)
    assert "'label': " in done.stdout and "'score': " in done.stdout  # both python lines printed
    assert (first / "hf" / "tokenizer_config.json").is_file()
