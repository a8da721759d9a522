"""The fine-tuning data readers in one namespace, and the format names they had before.

Why a namespace: the readers live in one module per concern (:mod:`zhlm.finetune.report`, the
report and reason names every reader shares; :mod:`zhlm.finetune.tables`, classification and
sentence-pair tables in every layout; :mod:`zhlm.finetune.squad`, SQuAD/CMRC 2018; NER in
:mod:`zhlm.finetune.ner`), while the task code, the NER reader and the tests import
``readers.X`` as they always did. Every reader returns ``(examples, report)``.

The three functions below are the old format names, kept as what they always read:
``sentence_tsv`` (a TSV whose header names the columns, else ``label<TAB>text``), ``pair_tsv``
(``text_a<TAB>text_b<TAB>label`` unless a header names them) and ``pair_jsonl`` (JSON lines
with ``sentence1, sentence2, label``). New configs say ``format`` ``tsv``/``jsonl`` and, where
the usual names and positions do not fit, ``text_fields`` and ``label_field``.
"""

from __future__ import annotations

from collections.abc import Sequence

from zhlm.finetune.report import (
    ANSWER_NOT_FOUND,
    ANSWER_REPAIRED,
    DUPLICATE_ID,
    EMPTY_CONTEXT,
    EMPTY_TEXT,
    MALFORMED_LINE,
    MISSING_FIELD,
    NO_ANSWER,
    NO_GOLD_LABEL,
    UNKNOWN_LABEL,
    Path,
    ReadIssue,
    ReadReport,
)
from zhlm.finetune.squad import MrcAnswer, MrcExample, read_squad
from zhlm.finetune.tables import Layout, PairExample, SentenceExample, read_table

__all__ = [
    "ANSWER_NOT_FOUND",
    "ANSWER_REPAIRED",
    "DUPLICATE_ID",
    "EMPTY_CONTEXT",
    "EMPTY_TEXT",
    "MALFORMED_LINE",
    "MISSING_FIELD",
    "NO_ANSWER",
    "NO_GOLD_LABEL",
    "UNKNOWN_LABEL",
    "Layout",
    "MrcAnswer",
    "MrcExample",
    "PairExample",
    "ReadIssue",
    "ReadReport",
    "SentenceExample",
    "read_pair_jsonl",
    "read_pair_tsv",
    "read_sentence_tsv",
    "read_squad",
    "read_table",
]

# Where ``sentence_tsv`` finds the fields of a file without a header: label first.
SENTENCE_TSV = Layout(texts=(1,), label=0)


def read_sentence_tsv(path: Path, labels: Sequence[str] | None = None, require_label=True):
    """Single-sentence TSV: columns by header name, else ``label<TAB>text``."""
    kind = "classification"
    return read_table(path, "tsv", kind, (), "", labels, require_label, default=SENTENCE_TSV)


def read_pair_tsv(path: Path, labels: Sequence[str] | None = None, require_label=True):
    """Sentence-pair TSV, ``text_a, text_b, label`` by position unless a header names them."""
    return read_table(path, "tsv", "pair", labels=labels, require_label=require_label)


def read_pair_jsonl(
    path: Path,
    labels: Sequence[str] | None = None,
    keys: tuple[str, str, str] = ("sentence1", "sentence2", "label"),
    require_label: bool = True,
):
    """Sentence-pair JSON lines (OCNLI, CLUE); ``keys`` names the two texts and the label."""
    return read_table(path, "jsonl", "pair", keys[:2], keys[2], labels, require_label)
