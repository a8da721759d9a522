"""Text to token ids with character offsets, for a BERT WordPiece vocab or a sentencepiece model.

Why offsets: word, phrase, entity and synonym information comes from jieba on characters, and it
reaches the tokens through each token's character span (see :mod:`zhlm.data.words`). Both
tokenizers therefore return ``(ids, starts, ends)`` per text, spans into the text as given.

WordPiece is the ``tokenizers`` library (Rust) configured exactly as Hugging Face's
``BertTokenizer`` for ``bert-base-chinese``: clean text, a space around every CJK character,
lower case with accents stripped, split on punctuation, greedy longest-match WordPiece with
``##`` continuations and at most 100 characters per word. ``tests/data/test_tokenizer.py``
checks it token for token against the pure-Python reference tokenizer on the shared corpora.

A new vocabulary can be trained with sentencepiece (:func:`train_sentencepiece`); the ``.model``
file is then used through the same interface (``data.tokenizer = "sentencepiece"``).
"""

import dataclasses
import os

import numpy as np

from zhlm.errors import NotFound, UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def default_vocab() -> str:
    """The Google Chinese BERT vocab (21,128 tokens) bundled with zhlm."""
    return os.path.join(os.path.dirname(__file__), "..", "resources", "google_zh_vocab.txt")


@dataclasses.dataclass
class Encoding:
    ids: np.ndarray  # int32 token ids
    starts: np.ndarray  # int32 first character of each token in the text
    ends: np.ndarray  # int32 one past the last character


class WordPiece:
    """BERT WordPiece from a ``vocab.txt`` (one token per line, id = line number)."""

    def __init__(self, vocab_path: str, lower_case: bool = True):
        import tokenizers
        from tokenizers import models, normalizers, pre_tokenizers

        self.vocab_path = vocab_path
        if not os.path.isfile(vocab_path):  # the tokenizers library's error names no path
            raise NotFound(f"{vocab_path}: no such vocabulary file")
        model = models.WordPiece.from_file(
            vocab_path, unk_token="[UNK]", max_input_chars_per_word=100
        )
        tok = tokenizers.Tokenizer(model)
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=lower_case
        )
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self._tok = tok
        self.vocab_size = tok.get_vocab_size(with_added_tokens=False)
        missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
        if missing:
            raise UserError(f"{vocab_path}: vocab lacks the special tokens {missing}")

    def token_to_id(self, token: str) -> int:
        return self._tok.token_to_id(token)

    def id_to_token(self, i: int) -> str:
        return self._tok.id_to_token(i)

    def tokenize(self, text: str) -> list[str]:
        return self._tok.encode(text, add_special_tokens=False).tokens

    def encode_batch(self, texts: list[str]) -> list[Encoding]:
        out = []
        for e in self._tok.encode_batch(texts, add_special_tokens=False):
            offsets = np.asarray(e.offsets, np.int32).reshape(-1, 2)
            out.append(Encoding(np.asarray(e.ids, np.int32), offsets[:, 0], offsets[:, 1]))
        return out

    def __getstate__(self):  # rebuilt in worker processes from the file, not pickled from Rust
        return {"vocab_path": self.vocab_path, "lower_case": self._tok.normalizer.lowercase}

    def __setstate__(self, state):
        self.__init__(state["vocab_path"], state["lower_case"])


class SentencePiece:
    """A sentencepiece model behind the WordPiece interface; its pieces carry their offsets."""

    def __init__(self, model_path: str):
        import sentencepiece as spm

        self.model_path = model_path
        if not os.path.isfile(model_path):
            raise NotFound(f"{model_path}: no such sentencepiece model file")
        self._sp = spm.SentencePieceProcessor(model_file=model_path)
        self.vocab_size = self._sp.get_piece_size()
        missing = [t for t in SPECIAL_TOKENS if self._sp.piece_to_id(t) == self._sp.unk_id()]
        missing = [t for t in missing if t != "[UNK]"]
        if missing:
            raise UserError(f"{model_path}: model lacks the special tokens {missing}")

    def token_to_id(self, token: str) -> int:
        return self._sp.unk_id() if token == "[UNK]" else self._sp.piece_to_id(token)

    def id_to_token(self, i: int) -> str:
        return self._sp.id_to_piece(i)

    def tokenize(self, text: str) -> list[str]:
        return self._sp.encode(text, out_type=str)

    def encode_batch(self, texts: list[str]) -> list[Encoding]:
        out = []
        for proto in self._sp.encode(texts, return_type="proto"):
            # Pieces that are only the word-boundary marker cover no character; drop them so
            # every token maps to text (words are found by character position).
            pieces = [p for p in proto.pieces if p.end > p.begin or p.id == self._sp.unk_id()]
            ids = np.fromiter((p.id for p in pieces), np.int32, len(pieces))
            # proto offsets are in bytes of UTF-8; convert to characters of the text.
            out.append(Encoding(ids, *_byte_to_char(proto.text, pieces)))
        return out

    def __getstate__(self):
        return {"model_path": self.model_path}

    def __setstate__(self, state):
        self.__init__(state["model_path"])


def _byte_to_char(text: str, pieces):
    char_of_byte = np.zeros(len(text.encode("utf-8")) + 1, np.int32)
    pos = 0
    for i, ch in enumerate(text):
        n = len(ch.encode("utf-8"))
        char_of_byte[pos : pos + n] = i
        pos += n
    char_of_byte[pos] = len(text)
    starts = np.fromiter((char_of_byte[p.begin] for p in pieces), np.int32, len(pieces))
    ends = np.fromiter((char_of_byte[p.end] for p in pieces), np.int32, len(pieces))
    return starts, ends


def train_sentencepiece(input_files, model_prefix: str, vocab_size: int, **kwargs) -> str:
    """Train a unigram sentencepiece model on clean text files; returns the ``.model`` path.

    The BERT special tokens get their own ids so the rest of zhlm can use the model unchanged.
    """
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(input_files),
        model_prefix=model_prefix,
        vocab_size=vocab_size,
        character_coverage=0.9995,  # the usual choice for CJK
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        unk_piece="[UNK]",
        pad_piece="[PAD]",
        user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"],
        **kwargs,
    )
    return model_prefix + ".model"


def load_tokenizer(data_config):
    """The tokenizer a data config names (``data.tokenizer`` and ``data.vocab``)."""
    if data_config.tokenizer == "wordpiece":
        return WordPiece(data_config.vocab or default_vocab(), data_config.lower_case)
    if data_config.tokenizer == "sentencepiece":
        if not data_config.vocab:
            raise UserError("data.tokenizer='sentencepiece' needs data.vocab=<model file>")
        return SentencePiece(data_config.vocab)
    raise UserError(f"unknown data.tokenizer {data_config.tokenizer!r}")
