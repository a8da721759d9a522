"""Documents of sentences to token arrays with the word information each recipe needs.

Why a separate step: the instance formats (:mod:`zhlm.data.instances`) only cut and join token
ranges; everything that needs the text (tokenizer, jieba, POS units, synonyms) happens here,
once per sentence, so a sentence is tokenised and segmented exactly once whatever the format.

A :class:`Document` is the concatenation of its sentences' tokens, one array per field, and the
token offsets where sentences start. Unit ids (``word_ids``, ``phrase_ids``, ``entity_ids``) are
unique within the document (-1 outside a unit); the instance writer renumbers them per sequence.
"""

import dataclasses
import os

import numpy as np

from zhlm.data import synonyms, tokenizer, units, words
from zhlm.errors import UserError

UNIT_FIELDS = ("word_ids", "phrase_ids", "entity_ids")
EXTRA_FIELDS = ("phrase_ids", "entity_ids", "similar_ids")


def resource(*parts) -> str:
    return os.path.join(os.path.dirname(__file__), "..", "resources", *parts)


@dataclasses.dataclass
class Document:
    fields: dict  # name -> int32 [T]; always input_ids and word_ids
    sentence_starts: np.ndarray  # int32 [num_sentences + 1], token offsets, last = T

    @property
    def num_tokens(self) -> int:
        return len(self.fields["input_ids"])


def check_fields(fields) -> tuple[str, ...]:
    unknown = sorted(set(fields) - set(EXTRA_FIELDS))
    if unknown:
        raise UserError(f"data.fields: unknown {unknown}; choose from {EXTRA_FIELDS}")
    return tuple(fields)


class Annotator:
    """Per-process state (tokenizer, jieba, lexicons, synonyms) built from the data config."""

    def __init__(self, data_config):
        self.fields = check_fields(data_config.fields)
        self.tokenizer = tokenizer.load_tokenizer(data_config)
        need_pos = "phrase_ids" in self.fields or "entity_ids" in self.fields
        self.segmenter = words.Segmenter(with_pos=need_pos)
        if need_pos:
            lexicon_dir = data_config.lexicon_dir or resource("lexicons")
            self.entity_lexicon, self.phrase_lexicon = units.load_lexicons(lexicon_dir)
        if "similar_ids" in self.fields:
            cilin = data_config.cilin or resource("lexicons", "cilin_synonyms.txt")
            self.similar = synonyms.SimilarWords(cilin, self.tokenizer)
        self.unk_id = self.tokenizer.token_to_id("[UNK]")

    def document(self, sentences, rng: np.random.Generator, report) -> Document | None:
        """Annotate one document's sentences; ``None`` (counted) if it has no token at all."""
        encodings = self.tokenizer.encode_batch(sentences)
        parts = {name: [] for name in ("input_ids", "word_ids") + self.fields}
        lengths = []
        offsets = dict.fromkeys(UNIT_FIELDS, 0)
        for text, enc in zip(sentences, encodings, strict=True):
            if len(enc.ids) == 0:
                report.reason("sentence_without_tokens")
                continue
            ws, tags = self.segmenter.cut(text)
            token_word, groups = words.token_word_index(enc, ws)
            per = {"input_ids": enc.ids, "word_ids": groups}
            if tags is not None:
                entity = units.entity_units(ws, tags, self.entity_lexicon)
                if "entity_ids" in self.fields:
                    per["entity_ids"] = units.to_tokens(entity, token_word)
                if "phrase_ids" in self.fields:
                    phrase = units.phrase_units(ws, tags, entity, self.phrase_lexicon)
                    per["phrase_ids"] = units.to_tokens(phrase, token_word)
            if "similar_ids" in self.fields:
                per["similar_ids"] = self.similar.for_sentence(text, enc, groups, rng, report)
            for name, values in per.items():
                if name in offsets:
                    values = np.where(values >= 0, values + offsets[name], -1)
                    offsets[name] = int(values.max(initial=offsets[name] - 1)) + 1
                parts[name].append(values.astype(np.int32, copy=False))
            lengths.append(len(enc.ids))
        if not lengths:
            report.reason("document_without_tokens")
            return None
        fields = {name: np.concatenate(v) for name, v in parts.items()}
        report.count("sentences", len(lengths))
        report.count("tokens", len(fields["input_ids"]))
        report.count("unk_tokens", int(np.count_nonzero(fields["input_ids"] == self.unk_id)))
        starts = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=starts[1:])
        return Document(fields, starts)
