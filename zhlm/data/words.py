"""Per-token word ids from jieba, and jieba's agreement with a gold segmentation.

Why: whole-word, n-gram and span masking (RoBERTa-wwm, MacBERT, SpanBERT, ALBERT) choose words,
not tokens, so every token needs the id of the word it belongs to. jieba segments characters,
the tokenizer makes tokens; the two meet through each token's character span:

* a token takes the word of its first character;
* a token whose span crosses a word boundary (a WordPiece word such as ``iphone12`` that jieba
  cut in two, or digits jieba split) joins the words it touches into one, so the pieces of a
  token are never in different words and a word never ends inside a token.

Chinese characters are one token each, so for Chinese the ids are jieba's words exactly; Latin
words and digit runs are one word per WordPiece word (all their ``##`` pieces share the id).
"""

import numpy as np

from zhlm.data.tokenizer import Encoding


class Segmenter:
    """jieba's segmentation, initialised once per process.

    Plain word ids come from jieba's dictionary without its HMM for unknown words: on 2,000
    gold People's Daily lines that scores F 0.827 against 0.806 with the HMM. They are cut by
    ``rjieba`` (jieba-rs, the same dictionary and algorithm in Rust), about 5x faster than
    jieba and word for word the same (tests/data/test_words.py checks it on real text).

    ``with_pos`` uses ``jieba.posseg`` itself, HMM on (it is what tags unknown person names),
    so ERNIE's entity and phrase units keep jieba's tags; rjieba's tagger differs from it.
    """

    def __init__(self, with_pos: bool = False):
        self.with_pos = with_pos
        if with_pos:
            import jieba
            import jieba.posseg

            jieba.setLogLevel(60)  # its "Building prefix dict" lines would interleave with tqdm
            jieba.initialize()
            self._posseg = jieba.posseg.cut
        else:
            import rjieba

            self._cut = rjieba.cut

    def cut(self, text: str) -> tuple[list[str], list[str] | None]:
        """Words covering ``text`` exactly (spaces and punctuation are words too)."""
        if self.with_pos:
            pairs = list(self._posseg(text))
            return [p.word for p in pairs], [p.flag for p in pairs]
        return self._cut(text, False), None


def token_word_index(enc: Encoding, words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """For each token: (the index of its first character's word, its group id).

    Group ids are consecutive from 0 and merge words a token crosses (see module doc).
    """
    lengths = np.fromiter(map(len, words), np.int64, len(words))
    char_word = np.repeat(np.arange(len(words)), lengths)
    if len(enc.ids) == 0:
        empty = np.zeros(0, np.int32)
        return empty, empty
    first = char_word[enc.starts]
    last = char_word[np.maximum(enc.ends - 1, enc.starts)]
    new_group = np.ones(len(first), bool)
    new_group[1:] = first[1:] > last[:-1]
    return first.astype(np.int32), (np.cumsum(new_group) - 1).astype(np.int32)


def word_ids(enc: Encoding, words: list[str]) -> np.ndarray:
    """Per-token word ids (>= 0, consecutive from 0) for one sentence."""
    return token_word_index(enc, words)[1]


# --- agreement with a gold segmentation (People's Daily, PKU standard) -------------------------


def parse_gold(line: str) -> list[tuple[str, str]]:
    """``word/POS`` pairs of one People's Daily line (two spaces between pairs)."""
    pairs = []
    for item in line.split():
        word, _, tag = item.rpartition("/")
        if word:
            pairs.append((word, tag))
    return pairs


def _spans(words):
    spans, pos = set(), 0
    for w in words:
        spans.add((pos, pos + len(w)))
        pos += len(w)
    return spans


def agreement(gold_lines, segment=None) -> dict:
    """Word-level precision, recall and F1 of ``segment`` (default: jieba) against gold.

    A predicted word counts as correct when its character span equals a gold word's span; spaces
    jieba returns as words are ignored (the gold has none).
    """
    if segment is None:
        segment = Segmenter().cut
    gold_n = pred_n = correct = 0
    for line in gold_lines:
        gold = [w for w, _ in parse_gold(line)]
        if not gold:
            continue
        text = "".join(gold)
        pred = segment(text)[0]
        gold_spans, pred_spans = _spans(gold), _spans(pred)
        pred_spans = {s for s, w in zip(sorted(pred_spans), pred, strict=True) if w.strip()}
        gold_n += len(gold_spans)
        pred_n += len(pred_spans)
        correct += len(gold_spans & pred_spans)
    p, r = correct / max(pred_n, 1), correct / max(gold_n, 1)
    return dict(precision=p, recall=r, f1=2 * p * r / max(p + r, 1e-12), gold=gold_n, pred=pred_n)
