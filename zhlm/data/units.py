"""Entity and phrase units over jieba words, for ERNIE 1.0's knowledge masking.

Why here and not on device: finding units needs POS tags and lexicons; the device only needs,
per token, the id of the unit it belongs to (``entity_ids``, ``phrase_ids``: >= 0 inside a unit,
tokens of one unit share it, -1 outside).

Entities (person, place, organisation) are

* a word ``jieba.posseg`` tags ``nr*`` (person), ``ns*`` (place) or ``nt*`` (organisation), with
  consecutive person words joined (``江/nr 泽民/nr`` is one person in the PKU standard); and
* a run of 2-4 words whose concatenation is in the THUOCL historical-people or place lexicons
  (catches names jieba cut apart). The longest match wins. Single words are not looked up: the
  place lexicon holds many common nouns (城市, 广场, 音乐会) that jieba rightly tags ``n``, and
  against the People's Daily gold they cost 4 points of precision for under 1 of recall.

Phrases follow one chunking rule over the PKU tags (which jieba also uses), on the words that
are not entities (measured against People's Daily in :mod:`zhlm.data.unit_eval`):

* noun phrase: one or more modifiers (``a an b n ng nz vn j``) then a noun head
  (``n ng nz vn an j``), 2-4 words in all (``国家/n 主席/n``, ``新/a 世纪/n``);
* number and time phrase: a run of numerals (``m``, or a word of digits, which jieba tags ``x``
  when they are full-width and cuts one a word), time words (``t``) and at most one final
  classifier (``q``) that holds at least two numbers, dates or classifiers (``三/m 条/q``,
  ``今天/t 晚上/t``, ``1998/m 年/m 1/m 月/m``); digits in a row count as one number, and digits
  with a following 月/日/号 (or four digits with 年) as one date, as PKU writes ``１２月/t``;
* a run of 2-4 words whose concatenation is in the THUOCL idiom or finance lexicons.

Runs are taken greedily from the left, longest first, so units never overlap. The number rule
is what lifted recall against the gold from 0.35 to 0.45 on jieba's words (jieba cuts
``１９９８年`` into five words and tags 年/月/日 ``m``); widening the noun tags (``v``, ``l``,
``r``) lost more precision than it gained recall, and a 5-word cap gained 0.3 points of F1.
"""

import os
import re

import numpy as np

from zhlm.errors import NotFound

ENTITY_PREFIXES = ("nr", "ns", "nt")
_MODIFIER = {"a", "an", "b", "n", "ng", "nz", "vn", "j"}
_HEAD = {"n", "ng", "nz", "vn", "an", "j"}
_MAX_WORDS = 4
_DIGITS = re.compile(r"[0-9０-９.．%％]+")  # jieba cuts full-width digits one a word
_DATE_SUFFIX = {"月", "日", "号"}


def read_lexicon(path: str) -> set[str]:
    """Words of a THUOCL ``word\\tDF`` file (any line ending, BOM tolerated)."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        text = f.read()
    return {line.split("\t")[0].strip() for line in text.splitlines() if line.strip()}


def load_lexicons(lexicon_dir: str) -> tuple[set[str], set[str]]:
    """(entity words, phrase words) from the THUOCL files in ``lexicon_dir`` ('' for none)."""
    if not lexicon_dir:
        return set(), set()

    def read(names):
        words = set()
        for name in names:
            path = os.path.join(lexicon_dir, f"THUOCL_{name}.txt")
            if not os.path.exists(path):
                raise NotFound(f"{path} missing (data.lexicon_dir={lexicon_dir!r})")
            words |= read_lexicon(path)
        return {w for w in words if len(w) >= 2}

    return read(["lishimingren", "diming"]), read(["chengyu", "caijing"])


def _lexicon_match(words, i, lexicon, min_words):
    for n in range(min(_MAX_WORDS, len(words) - i), min_words - 1, -1):
        if "".join(words[i : i + n]) in lexicon:
            return n
    return 0


def entity_units(words, tags, lexicon=frozenset()) -> np.ndarray:
    """Per-word entity id (>= 0, consecutive) or -1."""

    def length(i):
        n = _lexicon_match(words, i, lexicon, 2) if lexicon else 0
        if not n and tags[i].startswith(ENTITY_PREFIXES):
            n = 1
            while tags[i].startswith("nr") and i + n < len(words) and tags[i + n] == tags[i]:
                n += 1  # surname + given name
        return n

    return _number_runs(len(words), length)


def _number_runs(size, length):
    """Per-word unit id: scanning left to right, ``length(i)`` words from ``i`` form the next
    unit (ids 0, 1, ...); where it is 0 the word gets -1 and the scan moves on."""
    out = np.full(size, -1, np.int32)
    unit, i = 0, 0
    while i < size:
        n = length(i)
        if n:
            out[i : i + n] = unit
            unit += 1
        i += max(n, 1)
    return out


def _is_digits(word):
    return _DIGITS.fullmatch(word) is not None


def _number_length(words, tags, i, free):
    """Words in the number/time phrase starting at word ``i`` (0 if none): see the module doc."""
    n, items, j = len(words), 0, i
    while j < n and free[j]:
        if _is_digits(words[j]) and any(c.isdigit() for c in words[j]):
            k = j + 1
            while k < n and free[k] and _is_digits(words[k]):
                k += 1
            digits = "".join(words[j:k])
            year = digits.isdigit() and len(digits) == 4
            if k < n and free[k] and (words[k] in _DATE_SUFFIX or (year and words[k] == "年")):
                k += 1
            j, items = k, items + 1
        elif tags[j] in ("m", "t"):
            j, items = j + 1, items + 1
        elif tags[j] == "q" and items:
            j, items = j + 1, items + 1
            break  # a classifier closes the phrase: 三/m 条/q | 线路/n
        else:
            break
    return j - i if items >= 2 else 0


def _chunk_length(words, tags, i, free):
    """Words in the phrase starting at word ``i`` by the POS rule (0 if none)."""
    if tags[i] in ("m", "t") or (tags[i] == "x" and _is_digits(words[i])):
        if i and free[i - 1] and _is_digits(words[i - 1]):
            return 0  # inside digits the scan left (１|９９８年 would be two numbers)
        return _number_length(words, tags, i, free)
    best, n = 0, 0
    while i + n < len(tags) and n < _MAX_WORDS and free[i + n] and tags[i + n] in _MODIFIER:
        n += 1
        if n >= 2 and tags[i + n - 1] in _HEAD:
            best = n
    return best


def phrase_units(words, tags, entity=None, lexicon=frozenset()) -> np.ndarray:
    """Per-word phrase id (>= 0, consecutive) or -1; words inside entities are never phrases."""
    free = np.ones(len(words), bool) if entity is None else entity < 0

    def length(i):
        if not free[i]:
            return 0
        n = _lexicon_match(words, i, lexicon, 2) if lexicon else 0
        return n if n and free[i : i + n].all() else _chunk_length(words, tags, i, free)

    return _number_runs(len(words), length)


def to_tokens(word_units: np.ndarray, token_word: np.ndarray) -> np.ndarray:
    """Word-level unit ids to token level through each token's word index."""
    return word_units[token_word] if len(token_word) else np.zeros(0, np.int32)


def gold_entities(pairs) -> set[tuple[int, int]]:
    """Character spans of the gold person/place/organisation names of one parsed line."""
    words = [w for w, _ in pairs]
    tags = [t for _, t in pairs]
    return unit_spans(words, entity_units(words, tags))


def unit_spans(words, units) -> set[tuple[int, int]]:
    """Character spans of the units in a per-word unit id array."""
    spans, pos, open_ = {}, 0, None
    for w, u in zip(words, units, strict=True):
        if u >= 0:
            start, _ = spans.get(u, (pos, pos))
            spans[u] = (start, pos + len(w))
        pos += len(w)
    del open_
    return set(spans.values())
