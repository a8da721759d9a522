"""Fixtures the fine-tuning tests share (the random tiny fine-tuned models of each kind,
``workdirs``, are in tests/conftest.py: the library's platform test loads one too)."""

import pytest

from zhlm.data.tokenizer import WordPiece, default_vocab


@pytest.fixture(scope="module")
def tokenizer():
    return WordPiece(default_vocab())
