"""The WordPiece tokenizer against Hugging Face's reference BertTokenizer, token for token, and a
sentencepiece vocabulary through the same interface.

Why the legacy (pure-Python) BertTokenizer: in transformers 5 ``BertTokenizer`` is itself backed
by the ``tokenizers`` library we use, so comparing with it alone would test a library against
itself; the Python implementation is the independent reference bert-base-chinese was built with.
"""

import os

import numpy as np
import pytest
from helpers import DATA

from zhlm.data import tokenizer, words

VOCAB = os.path.join(DATA, "vocab", "google_zh_vocab.txt")


def corpus_lines(n):
    with open(os.path.join(DATA, "corpus", "clue_small_docs.txt"), encoding="utf-8") as f:
        clue = [line.strip() for line in f if line.strip()][:n]
    with open(os.path.join(DATA, "corpus", "peoples_daily_199801_pos.txt"), encoding="utf-8") as f:
        pd = [
            "".join(w for w, _ in words.parse_gold(line))
            for _, line in zip(range(n), f, strict=False)
        ]
    return clue + [p for p in pd if p]


@pytest.fixture(scope="module")
def wordpiece():
    return tokenizer.WordPiece(VOCAB)


def test_bundled_vocab_is_the_google_vocab():
    with open(tokenizer.default_vocab(), "rb") as a, open(VOCAB, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.slow
def test_matches_reference_bert_tokenizer_on_corpora(wordpiece):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    ref = BertTokenizerLegacy(VOCAB, do_lower_case=True)
    lines = corpus_lines(1500)
    ours = [e.ids.tolist() for e in wordpiece.encode_batch(lines)]
    theirs = [ref.convert_tokens_to_ids(ref.tokenize(line)) for line in lines]
    mismatched = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    assert not mismatched, [lines[i][:50] for i in mismatched[:3]]
    assert sum(map(len, ours)) > 100_000


def test_matches_reference_on_hard_cases(wordpiece):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    ref = BertTokenizerLegacy(VOCAB, do_lower_case=True)
    cases = [
        "ＡＢＣ全角，iPhone12和ＧＰＵ",
        "Café naïve résumé",
        "x" * 150 + " 中文",
        "😀表情\u200b符号",
        "2024年3月，价格为999.99元",
        "「引号」『书名』《红楼梦》",
        "a\tb\nc\u3000d",
    ]
    for case in cases:
        assert wordpiece.tokenize(case) == ref.tokenize(case), case


def test_offsets_point_into_the_text(wordpiece):
    text = "我爱Hello world，ＡＢＣ123"
    enc = wordpiece.encode_batch([text])[0]
    pieces = [text[a:b].lower() for a, b in zip(enc.starts, enc.ends, strict=True)]
    assert pieces == ["我", "爱", "hello", "world", "，", "ａ", "ｂ", "ｃ", "123"]  # pieces of ##


def test_sentencepiece_trained_and_used_through_same_interface(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(corpus_lines(800)), encoding="utf-8")
    model = tokenizer.train_sentencepiece([str(path)], str(tmp_path / "sp"), vocab_size=4000)
    sp = tokenizer.SentencePiece(model)
    assert sp.vocab_size == 4000
    for t in tokenizer.SPECIAL_TOKENS:
        assert sp.id_to_token(sp.token_to_id(t)) == t
    text = "中共中央总书记发表新年讲话。"
    enc = sp.encode_batch([text])[0]
    assert "".join(text[a:b] for a, b in zip(enc.starts, enc.ends, strict=True)) == text
    seg = words.Segmenter()
    ids = words.word_ids(enc, seg.cut(text)[0])
    assert len(ids) == len(enc.ids) and np.all(np.diff(ids) >= 0)
