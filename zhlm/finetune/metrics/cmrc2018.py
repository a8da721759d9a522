"""The CMRC 2018 span-extraction metric (F1 and EM), as the official evaluation script defines it.

Why our own copy: the official ``cmrc2018_evaluate.py`` is Python 2 and calls NLTK's
``word_tokenize``, which needs the ``punkt`` model downloaded at run time. Every Chinese MRC paper
(CMRC 2018, DRCD, MacBERT, Chinese-BERT-wwm) reports this metric, so our numbers must be the
official ones; this module reproduces its definition in Python 3 with no downloads.

The definition, point by point:

* Text is lower-cased and stripped.
* *Mixed segmentation*: every CJK character (U+4E00..U+9FA5, the official range) is a token; so is
  every mark of :data:`PUNCTUATION`; the runs of other characters between them are split into
  words by :func:`word_tokenize`. For scoring, punctuation is removed first, and a removed mark
  does **not** end a run: ``"ω-force"`` is one word ``"ωforce"``, as in the official script.
* F1 per reference: the longest common *contiguous* token run between prediction and reference
  (not the bag-of-tokens overlap SQuAD uses); precision and recall are its length over each side's
  token count. The score of a question is the maximum over its references.
* EM: prediction equals a reference after lower-casing, stripping and removing punctuation.
* Unanswered questions score 0 and still count in TOTAL; both scores are x100, AVERAGE is their
  mean.

Where we knowingly differ from the official script (all outside what a valid dataset produces):
a question with no reference scores 0 (the official script crashes on ``max([])``), and an empty
dataset scores 0 (it divides by zero). The official list writes ``'……'`` as one two-character
item; since the script compares single characters against it, neither ``'…'`` nor ``'……'`` is ever
treated as punctuation there, so neither is here. :func:`word_tokenize` documents how it stands
in for NLTK. Checked against a Python 3 transliteration of the official script running NLTK 3.9.1:
identical F1 and EM on each of 16,884 predictions over the CMRC 2018 dev and trial questions.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zhlm.errors import UserError

# The official list, one character each. It names '……' as a single two-character entry, which can
# never equal a single character, so the ellipsis is deliberately absent (see module docstring).
PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")

# Marks the Penn Treebank conventions always cut off as tokens of their own. The official
# PUNCTUATION marks never reach word_tokenize inside mixed_segmentation, but the function is public
# and handles them the NLTK way too.
_ALWAYS_ALONE = frozenset(";@#$%&?!*()[]{}<>«»‘“„”’")
# Quote directions are decided on the raw text and parked as two Unicode noncharacters (reserved
# for internal use, so absent from real text) that the later cuts, which insert spaces, cannot
# change. NLTK decides them first, too.
_OPEN_QUOTE, _CLOSE_QUOTE = "\ufdd0", "\ufdd1"
_QUOTE_TOKENS = {_OPEN_QUOTE: "``", _CLOSE_QUOTE: "''"}
# A double quote after one of these (or a space) opens a quotation.
_OPEN_CONTEXT = frozenset(" ([{<«“‘„`")
# What may follow a sentence-final period and still leave it "final".
_CLOSERS = frozenset(")]}>\"'»”’" + _CLOSE_QUOTE)
_CHUNK = re.compile(r"(\S+)(\s?)")
# Marks that the Treebank passes have already padded with spaces when they cut a bare closing
# apostrophe ("dogs' ,"); brackets, "*" and closing quotes are padded later, so "dogs')" keeps it
# until the clitic pass. A tab does not count as a space there.
_EARLY_SPACE = frozenset(" ,:;@#$%&?!`«“‘„" + _OPEN_QUOTE)
# Clitics cut off the end of a word, in the Treebank's two passes: do|n't, john|'s, they|'ll|'s.
_CLITICS_FIRST = ("'s", "'m", "'d", "'")
_CLITICS_SECOND = ("'ll", "'re", "'ve", "n't")
# Contractions the Treebank tokenizer splits in two (MacIntyre's list), wherever they stand as a
# whole word inside a token: "cannot's" -> can not 's.
_CONTRACTIONS = re.compile(
    r"\b(?:(can)(not)|(d)('ye)|(gim)(me)|(gon)(na)|(got)(ta)|(lem)(me)|(more)('n)|(wan)(na)$)\b",
    re.IGNORECASE,
)
# 'tis and 'twas are split only where a token starts with them; a leading apostrophe has usually
# been cut off before, so in practice this fires after a split above ("more'n'tis").
_TIS_TWAS = re.compile(r"^('t)(is|was)\b", re.IGNORECASE)


def is_cjk(char: str) -> bool:
    """The official test, ``[\\u4e00-\\u9fa5]``: the CJK Unified Ideographs block up to 1991."""
    return "\u4e00" <= char <= "\u9fa5"


def word_tokenize(text: str) -> list[str]:
    """Split a non-CJK run into words as NLTK's ``word_tokenize`` does, without punkt data.

    Follows the Penn Treebank conventions of ``NLTKWordTokenizer`` in NLTK 3.9.1: split on
    whitespace; ``; @ # $ % & ? ! * ( ) [ ] { } < >`` and the unicode quotes stand alone; a comma
    or colon stands alone unless a digit follows (``1,000``, ``3.14`` and ``10:30`` stay whole);
    runs of 2+ periods stand alone; a single period is cut off only at the very end of the text
    (final ``u.s.`` is ``u.s`` ``.``, mid-text ``u.s.`` stays whole); ``"`` becomes two
    backquotes when it opens a quotation and two apostrophes otherwise; clitics
    (``n't 's 'll 're 've 'm 'd``) and a bare closing apostrophe are cut off words;
    ``cannot gonna gotta wanna gimme lemme more'n d'ye 'tis 'twas`` are split in two. So Latin
    words, digits, decimals, percentages and amounts give NLTK's tokens exactly.

    Verified token for token against NLTK 3.9.1's ``word_tokenize(..., preserve_line=True)`` on
    all 5,468 distinct non-CJK runs of the CMRC 2018 dev and trial sets (contexts, questions,
    answers) and on 350,000 random strings built from these marks.

    Where it can differ from the official script's call: (1) ``word_tokenize`` first splits the
    run into sentences with punkt (a downloaded model) and cuts the final period of each, so a
    mid-run ``"end. next"`` can be ``end . next`` there and is ``end. next`` here; an initial
    before a lower-case word (``henry a. walsh``, the only such case in the CMRC answers) is not a
    sentence end for punkt either. (2) NLTK 3.10 (late 2025) began cutting dashes U+2012..U+2015
    and changed a leading apostrophe (``'shade'``); we keep the pre-3.10 behaviour, under which
    the published CMRC numbers were computed (36 of the 5,468 runs tokenise differently in 3.10).
    """
    tokens: list[str] = []
    for chunk in _CHUNK.finditer(_detach_final_period(_mark_quotes(text))):
        pieces = _split_marks(chunk[1])
        # chunk[2] is the whitespace character after the chunk, if any: only a plain space
        # lets the Treebank cut a bare closing apostrophe early.
        for piece, after in zip(pieces, pieces[1:] + [chunk[2]], strict=True):
            early_space = after[:1] in _EARLY_SPACE or after[:2] == ".."
            for token in _split_clitics(piece, early_space):
                for word in _CONTRACTIONS.sub(_spaced_groups, token).split():
                    tokens.extend(_TIS_TWAS.sub(_spaced_groups, word).split())
    return [_QUOTE_TOKENS.get(token, token) for token in tokens]


def _mark_quotes(text: str) -> str:
    """Decide each double quote's direction; cut an apostrophe off a one-letter word.

    As in the Treebank passes, the direction looks at the raw character before the quote, where
    only the brackets, the opening marks and a quote that opens the text count as openers: a
    quote just decided does not decide the next one.
    """
    out = ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == '"' or text.startswith("''", i):
            opens = (
                text[i - 1] in _OPEN_CONTEXT or (i == 1 and text[0] == '"')
                if i
                else char == '"'  # a lone '' never opens the text
            )
            out += f" {_OPEN_QUOTE} " if opens else _CLOSE_QUOTE
            i += 1 if char == '"' else 2
            continue
        if char in "«“‘„":
            char = f" {char} "
        elif (
            char == "'"
            and _is_word_char(text[i + 1 : i + 2])
            and not _is_word_char(text[i + 2 : i + 3])
            and text[i + 1].lower() not in "mtsdn"
        ):
            # An apostrophe before a one-letter word that is no clitic ('a, x'b) is cut off.
            out += "' " + text[i + 1]
            i += 2
            continue
        out += char
        i += 1
    return out


def _detach_final_period(text: str) -> str:
    """Cut off the text's last period if only closers, spaces and trailing whitespace follow."""
    end = len(text.rstrip())
    # Between the period and the trailing whitespace only plain spaces count, not tabs.
    while end and (text[end - 1] == " " or text[end - 1] in _CLOSERS):
        end -= 1
    if end >= 2 and text[end - 1] == "." and text[end - 2] != ".":
        return f"{text[: end - 1]} . {text[end:]}"
    return text


def _split_marks(chunk: str) -> list[str]:
    """Cut one whitespace-free chunk at the marks that always or conditionally stand alone."""
    out: list[str] = []
    word = ""
    swallowed = False
    i = 0
    while i < len(chunk):
        char, rest = chunk[i], chunk[i + 1 :]
        width = 1
        mark = None
        if char in _ALWAYS_ALONE or char in _QUOTE_TOKENS:
            mark = char
        elif char in ",:" and not rest[:1].isdecimal() and not swallowed:
            mark = char
        elif char == "." and rest.startswith("."):
            width = len(chunk[i:]) - len(chunk[i:].lstrip("."))
            mark = chunk[i : i + width]
        elif char in "-`" and rest.startswith(char):
            # Double dashes and double backquotes stand alone, pair by pair ("```" -> `` `).
            width, mark = 2, char * 2
        elif char == "`":
            mark = char
        # The Treebank's comma rule consumes the character after the comma, so in ",,x" the
        # second comma is never examined and stays with the word (", ,x").
        swallowed = mark in (",", ":")
        if mark is None:
            word += char
        else:
            out.extend((word, mark) if word else (mark,))
            word = ""
        i += width
    return out + [word] if word else out


def _split_clitics(word: str, early_space: bool) -> list[str]:
    """Cut a bare closing apostrophe, then at most one clitic of each pass, off a word's end."""
    tail: list[str] = []
    passes = (
        [("'",), _CLITICS_FIRST, _CLITICS_SECOND]
        if early_space
        else [_CLITICS_FIRST, _CLITICS_SECOND]
    )
    for clitics in passes:
        for clitic in clitics:
            stem = word[: -len(clitic)]
            if word.endswith(clitic) and stem and stem[-1] != "'":
                word, tail = stem, [clitic, *tail]
                break
    return [word, *tail]


def _spaced_groups(match: re.Match) -> str:
    return " " + " ".join(group for group in match.groups() if group) + " "


def _is_word_char(char: str) -> bool:
    """Regex ``\\w`` for one character ('' is not one)."""
    return char.isalnum() or char == "_"


def mixed_segmentation(text: str, remove_punctuation: bool = False) -> list[str]:
    """Tokens of ``text``: CJK characters and punctuation one each, other runs by word_tokenize.

    With ``remove_punctuation`` the marks are dropped without ending the surrounding run, which is
    what the official scorer does (it calls this with punctuation removed).
    """
    tokens: list[str] = []
    run = ""
    for char in text.lower().strip():
        if remove_punctuation and char in PUNCTUATION:
            continue
        if is_cjk(char) or char in PUNCTUATION:
            tokens.extend(word_tokenize(run) if run else ())
            tokens.append(char)
            run = ""
        else:
            run += char
    tokens.extend(word_tokenize(run) if run else ())
    return tokens


def remove_punctuation(text: str) -> str:
    """Lower-case, strip, then drop every :data:`PUNCTUATION` mark (the EM normalisation)."""
    return "".join(char for char in text.lower().strip() if char not in PUNCTUATION)


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous subsequence of two token lists."""
    best = 0
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0] * (len(b) + 1)
        for j, other in enumerate(b):
            if token == other:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def f1_score(prediction: str, references: Iterable[str]) -> float:
    """Best F1 in [0, 1] of ``prediction`` against any reference; 0 when there is none."""
    predicted = mixed_segmentation(prediction, remove_punctuation=True)
    best = 0.0
    for reference in references:
        gold = mixed_segmentation(reference, remove_punctuation=True)
        common = longest_common_run(gold, predicted)
        if common:
            precision, recall = common / len(predicted), common / len(gold)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def exact_match(prediction: str, references: Iterable[str]) -> float:
    """1.0 if ``prediction`` equals a reference after :func:`remove_punctuation`, else 0.0."""
    predicted = remove_punctuation(prediction)
    return float(any(remove_punctuation(reference) == predicted for reference in references))


@dataclasses.dataclass(frozen=True)
class CmrcScore:
    """Corpus-level scores, x100 like the official script, plus the ids with no prediction."""

    f1: float
    em: float
    total: int
    skip: int
    unanswered: tuple[str, ...] = ()

    @property
    def average(self) -> float:
        return (self.f1 + self.em) / 2

    def official_dict(self, prediction_file: str | None = None) -> dict[str, Any]:
        """The official script's JSON fields and formatting (scores as '%.3f' strings)."""
        out: dict[str, Any] = {
            "AVERAGE": f"{self.average:.3f}",
            "F1": f"{self.f1:.3f}",
            "EM": f"{self.em:.3f}",
            "TOTAL": self.total,
            "SKIP": self.skip,
        }
        if prediction_file is not None:
            out["FILE"] = prediction_file
        return out


def load_references(dataset: Any) -> list[tuple[str, list[str]]]:
    """``(question_id, reference_texts)`` for every question of a parsed dataset JSON.

    Accepts the SQuAD-style layout (``{"data": [{"paragraphs": [{"qas": [{"id", "answers":
    [{"text"}]}]}]}]}``) and the original CMRC 2018 layout (``[{"context_id", "context_text",
    "qas": [{"query_id", "query_text", "answers": ["..."]}]}]``). A list, not a dict, so that a
    repeated id counts twice in TOTAL, as it does officially.
    """
    if isinstance(dataset, Mapping) and "data" in dataset:
        questions = (
            qa
            for article in dataset["data"]
            for para in article["paragraphs"]
            for qa in para["qas"]
        )
        id_key = "id"
    elif isinstance(dataset, list):
        questions = (qa for context in dataset for qa in context["qas"])
        id_key = "query_id"
    else:
        raise UserError("not a CMRC dataset: expected {'data': [...]} or a list of contexts")
    references = []
    for qa in questions:
        texts = [a["text"] if isinstance(a, Mapping) else a for a in qa.get("answers", ())]
        references.append((str(qa[id_key]).strip(), [str(t) for t in texts]))
    return references


def evaluate(
    references: Iterable[tuple[str, Sequence[str]]], predictions: Mapping[str, Any]
) -> CmrcScore:
    """Score ``{question_id: answer}`` predictions against :func:`load_references` output."""
    f1 = em = 0.0
    total = 0
    unanswered = []
    for question_id, texts in references:
        total += 1
        if question_id not in predictions:
            unanswered.append(question_id)
            continue
        # The official script applies str() to whatever the prediction file holds.
        prediction = str(predictions[question_id])
        f1 += f1_score(prediction, texts)
        em += exact_match(prediction, texts)
    scale = 100.0 / total if total else 0.0
    return CmrcScore(f1 * scale, em * scale, total, len(unanswered), tuple(unanswered))


def evaluate_files(
    dataset_path: str | os.PathLike, predictions_path: str | os.PathLike
) -> CmrcScore:
    """:func:`evaluate` on a dataset JSON (either layout) and a ``{id: answer}`` JSON file."""
    with open(dataset_path, encoding="utf-8") as f:
        references = load_references(json.load(f))
    with open(predictions_path, encoding="utf-8") as f:
        predictions = json.load(f)
    if not isinstance(predictions, Mapping):
        raise UserError(f"{predictions_path}: predictions must be a JSON object {{id: answer}}")
    return evaluate(references, predictions)
