"""Fixtures the fine-tuning tests share."""

import pytest

from zhlm.data.tokenizer import WordPiece, default_vocab


@pytest.fixture(scope="module")
def tokenizer():
    return WordPiece(default_vocab())
