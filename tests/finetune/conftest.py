"""Fixtures the fine-tuning tests share: a tokenizer, and random tiny fine-tuned models of
each kind saved the way zhlm-finetune saves ``best/`` (what the prediction tests load)."""

import os
import sys

import pytest
from helpers import ROOT, load_task

from zhlm.data.tokenizer import WordPiece, default_vocab

sys.path.insert(0, os.path.join(ROOT, "tools"))
from bench_predict import tiny_workdir  # noqa: E402 (tools/ is a script folder)

# kind -> (task config, task overrides) of the models ``workdirs`` makes.
MODELS = {
    "classification": ("chnsenticorp", dict(max_seq_length=32)),
    "pair": ("lcqmc", dict(max_seq_length=32)),
    "ner": ("msra_ner", dict(max_seq_length=24, doc_stride=8)),
    "mrc": ("cmrc2018", dict(max_seq_length=64, doc_stride=32, max_query_length=16)),
}


@pytest.fixture(scope="module")
def tokenizer():
    return WordPiece(default_vocab())


@pytest.fixture(scope="session")
def workdirs(tmp_path_factory):
    """``workdirs[kind]``: a workdir with a random tiny model of that kind, made when first
    asked for, once per test session."""
    root = tmp_path_factory.mktemp("models")

    class Made(dict):
        def __missing__(self, kind):
            name, task = MODELS[kind]
            config = load_task(name)
            config.task.update(**task)
            self[kind] = tiny_workdir(str(root / name), config)
            return self[kind]

    return Made()
