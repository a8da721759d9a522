"""Similar-word candidates for MacBERT's "MLM as correction", from the Cilin synonym groups.

Why at prepare time: the device replaces a selected word by a similar word, so each token needs
the token id that would stand in its place (``similar_ids``). MacBERT used the Synonyms toolkit
(word2vec neighbours); its vectors are not available offline, so the candidates come from HIT
Cilin (extended), groups marked ``=`` (true synonyms; ``#`` related and ``@`` isolated are not).

Length rule (MacBERT never said): the replacement must have exactly as many tokens as the word,
so ``similar_ids`` stays aligned 1:1 with the positions and the model's input length and every
other field are unchanged.

* A word with Cilin synonyms of its token length gets one of them, drawn at random.
* A synonym of another length is never truncated or padded (half a word is not a similar
  word); if all of a word's synonyms have other lengths it is treated as having none.
* A word with no usable synonym gets a random word of the same token length, as MacBERT does,
  drawn from the Cilin vocabulary; lengths Cilin lacks (long names, long Latin words) get
  random single-character tokens from that vocabulary.

Each draw is fixed at prepare time (the shard's seed), so a sequence always offers the same
candidate; the device still decides per step whether a word is masked and how.
"""

import numpy as np

from zhlm.errors import UserError


def read_cilin(path: str) -> list[list[str]]:
    """The ``=`` groups of a Cilin file (``CODE= w1 w2 ...``)."""
    groups = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            code, sep, rest = line.strip().partition(" ")
            if not sep or not code:
                if line.strip():
                    raise UserError(f"{path}:{line_no}: not 'CODE= word ...': {line[:40]!r}")
                continue
            if code.endswith("="):
                words = list(dict.fromkeys(rest.split()))
                if len(words) >= 2:
                    groups.append(words)
    return groups


class SimilarWords:
    """Token-level similar-word candidates for a tokenizer (see module doc for the rules)."""

    def __init__(self, cilin_path: str, tokenizer):
        groups = read_cilin(cilin_path)
        vocab = sorted({w for g in groups for w in g})
        encoded = tokenizer.encode_batch(vocab)
        unk = tokenizer.token_to_id("[UNK]")
        self._ids = {}
        for word, enc in zip(vocab, encoded, strict=True):
            if len(enc.ids) and unk not in enc.ids:
                self._ids[word] = enc.ids
        # word -> synonyms grouped by token length (a word may sit in several groups)
        self._synonyms: dict[str, dict[int, list[np.ndarray]]] = {}
        for group in groups:
            for word in group:
                by_len = self._synonyms.setdefault(word, {})
                for other in group:
                    if other != word and other in self._ids:
                        by_len.setdefault(len(self._ids[other]), []).append(self._ids[other])
        by_length: dict[int, list[np.ndarray]] = {}
        for ids in self._ids.values():
            by_length.setdefault(len(ids), []).append(ids)
        self._random = {n: np.stack(v) for n, v in by_length.items()}
        self._chars = self._random[1][:, 0]

    def candidate(self, word: str, n_tokens: int, rng: np.random.Generator, report=None):
        """Token ids (length ``n_tokens``) to put in place of ``word``."""
        same = self._synonyms.get(word, {}).get(n_tokens)
        if same:
            if report is not None:
                report.count("similar_from_cilin")
            return same[rng.integers(len(same))]
        if report is not None:
            report.count("similar_random_word")
        pool = self._random.get(n_tokens)
        if pool is not None:
            return pool[rng.integers(len(pool))]
        return self._chars[rng.integers(len(self._chars), size=n_tokens)]

    def for_sentence(self, text, enc, groups, rng, report=None) -> np.ndarray:
        """Per-token candidates for one sentence, word by word (``groups``: word id per token)."""
        out = np.empty(len(enc.ids), np.int32)
        bounds = np.flatnonzero(np.diff(groups, prepend=-1, append=-2))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            word = text[enc.starts[a] : enc.ends[b - 1]]
            out[a:b] = self.candidate(word, int(b - a), rng, report)
        return out
