"""Annotated documents to fixed-length training sequences in the four input formats.

Why these four: they are the choices the six recipes made (RoBERTa Table 2 names them).

* ``segment_pair`` (BERT, ERNIE): ``[CLS] A [SEP] B [SEP]``; B is the text after A in 50% of the
  instances (``sentence_label`` 0 = IsNext) and text from another document of the shard
  otherwise (1 = random), BERT's convention; a one-sentence chunk always gets a random B, as
  in BERT. Unused sentences of a random pair go back, so no text is wasted.
* ``sop`` (ALBERT, MacBERT): two consecutive segments of one document; swapped in 50% of the
  instances (``sentence_label`` 1 = swapped, 0 = in order). A chunk of one sentence is split
  inside the sentence, so short documents still train SOP.
* ``full_sentences`` (RoBERTa-wwm): ``[CLS] tokens [SEP]`` packed to the length, crossing
  document boundaries with a ``[SEP]`` between documents; long sentences continue in the next
  sequence.
* ``doc_sentences`` (SpanBERT): packed the same way but never across a document; the last
  sequence of a document may be shorter.

``short_seq_prob`` picks, per sequence, a random shorter target length (BERT's trick to reduce
the mismatch with short fine-tuning inputs). Unit ids are renumbered per sequence (consecutive
from 0, each segment and document separately, so ids of two documents never collide);
specials and padding are -1, and ``similar_ids`` is -1 there too.
"""

import numpy as np

from zhlm.data.annotate import UNIT_FIELDS, Document
from zhlm.errors import UserError

FORMATS = ("segment_pair", "sop", "full_sentences", "doc_sentences")


def output_fields(fields) -> tuple[str, ...]:
    return ("input_ids", "token_type_ids", "attention_mask", "word_ids") + tuple(fields)


class Writer:
    """Lays out ``[CLS] A [SEP] (B [SEP])`` pieces into the fixed-length int32 arrays."""

    def __init__(self, max_seq_length: int, fields, cls_id: int, sep_id: int, pad_id: int):
        self.length = max_seq_length
        self.fields = tuple(fields)
        self.cls, self.sep, self.pad = cls_id, sep_id, pad_id

    def __call__(self, segments, label=None, types=None) -> dict:
        """``segments``: a list of segments, each a list of ``(doc, start, end)`` pieces; a
        ``[SEP]`` follows every piece that ends a segment and every document change.
        ``types``: each segment's ``token_type_ids`` value (default: its index; dialogues
        give each turn its speaker's role, :mod:`zhlm.data.dialogue`)."""
        n = self.length
        out = {name: np.full(n, -1, np.int32) for name in ("word_ids",) + self.fields}
        out["input_ids"] = np.full(n, self.pad, np.int32)
        out["token_type_ids"] = np.zeros(n, np.int32)
        out["attention_mask"] = np.zeros(n, np.int32)
        out["input_ids"][0] = self.cls
        pos, next_unit = 1, dict.fromkeys(UNIT_FIELDS, 0)
        for segment_index, pieces in enumerate(segments):
            for doc, start, end in pieces:
                k = end - start
                sl = slice(pos, pos + k)
                out["input_ids"][sl] = doc.fields["input_ids"][start:end]
                for name in ("word_ids",) + self.fields:
                    values = doc.fields[name][start:end]
                    if name in next_unit:
                        values, next_unit[name] = _renumber(values, next_unit[name])
                    out[name][sl] = values
                kind = segment_index if types is None else types[segment_index]
                out["token_type_ids"][pos : pos + k + 1] = kind
                pos += k
                out["input_ids"][pos] = self.sep
                pos += 1
        if pos > n:
            raise AssertionError(f"sequence of {pos} tokens > max_seq_length {n}")
        out["attention_mask"][:pos] = 1
        if label is not None:
            out["sentence_label"] = np.int32(label)
        return out


def _renumber(values, first):
    real = values >= 0
    ids = values[real]
    if not len(ids):
        return values, first
    if np.all(ids[1:] >= ids[:-1]):  # annotate's ids ascend along the text: no sort needed
        new = np.empty(len(ids), bool)
        new[0] = True
        np.not_equal(ids[1:], ids[:-1], out=new[1:])
        rank = np.cumsum(new) - 1
    else:
        rank = np.unique(ids, return_inverse=True)[1]
    out = np.full(len(values), -1, np.int32)
    out[real] = rank + first
    return out, first + int(rank.max()) + 1


def _target(max_tokens, short_seq_prob, rng):
    return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens


def _truncate(a, b, max_tokens, rng):
    """BERT's truncate_seq_pair on token ranges: trim the longer side, front or back at random."""
    (a0, a1), (b0, b1) = a, b
    while (a1 - a0) + (b1 - b0) > max_tokens:
        if a1 - a0 > b1 - b0:
            a0, a1 = (a0 + 1, a1) if rng.random() < 0.5 else (a0, a1 - 1)
        else:
            b0, b1 = (b0 + 1, b1) if rng.random() < 0.5 else (b0, b1 - 1)
    return (a0, a1), (b0, b1)


def pair_instances(docs, index, writer, fmt, short_seq_prob, rng, report):
    """SEGMENT-PAIR (NSP) or SOP instances from ``docs[index]``."""
    doc = docs[index]
    starts = doc.sentence_starts
    max_tokens = writer.length - 3
    target = _target(max_tokens, short_seq_prob, rng)
    chunk_first, i, n_sent = 0, 0, len(starts) - 1
    while i < n_sent:
        i += 1
        if i < n_sent and starts[i] - starts[chunk_first] < target:
            continue
        chunk = (chunk_first, i)  # sentences [chunk_first, i)
        a_end = chunk[0] + 1 if i - chunk[0] < 2 else rng.randint(chunk[0] + 1, i - 1)
        a = (starts[chunk[0]], starts[a_end])
        b_doc, label = doc, 0
        if fmt == "segment_pair" and (a_end == i or rng.random() < 0.5):
            if len(docs) > 1:
                label = 1
                b_doc, b = _random_segment(docs, index, target - (a[1] - a[0]), rng)
                i = a_end  # the sentences after A go back for the next chunk
            else:
                report.reason("nsp_random_impossible_single_document_shard")
                b = (starts[a_end], starts[i])
        else:
            b = (starts[a_end], starts[i])
        if b[1] <= b[0]:  # one sentence and no random B: split it
            if a[1] - a[0] < 2:
                report.reason("pair_skipped_single_token")
                chunk_first, target = i, _target(max_tokens, short_seq_prob, rng)
                continue
            cut = rng.randint(a[0] + 1, a[1] - 1)
            a, b = (a[0], cut), (cut, a[1])
        a, b = _truncate(a, b, max_tokens, rng)
        segs = [[(doc, *a)], [(b_doc, *b)]]
        if fmt == "sop" and rng.random() < 0.5:
            segs, label = segs[::-1], 1
        yield writer(segs, label)
        chunk_first, target = i, _target(max_tokens, short_seq_prob, rng)


def _random_segment(docs, index, target, rng):
    other = rng.randrange(len(docs) - 1)
    other += other >= index  # any document but this one
    d = docs[other]
    s = d.sentence_starts
    first = rng.randrange(len(s) - 1)
    end = first + 1
    while end < len(s) - 1 and s[end] - s[first] < target:
        end += 1
    return d, (s[first], s[end])


def packed_instances(docs, writer, cross_documents, short_seq_prob, rng):
    """FULL-SENTENCES (``cross_documents``) or DOC-SENTENCES from a list of documents.

    Each sequence is ``[CLS]`` then pieces of whole sentences, one piece per document, each
    followed by ``[SEP]``. A sentence longer than a whole sequence is cut and continues.
    """
    max_tokens = writer.length - 1  # everything after [CLS], the pieces' [SEP]s included
    pieces, used = [], 0
    target = _target(max_tokens, short_seq_prob, rng)

    def flush():
        nonlocal pieces, used, target
        out = writer([pieces])
        pieces, used, target = [], 0, _target(max_tokens, short_seq_prob, rng)
        return out

    for doc in docs:
        pos = 0
        while pos < doc.num_tokens:
            room = target - used - 1
            take = _whole_sentences(doc, pos, room) if room > 0 else 0
            if take == 0:
                if pieces:
                    yield flush()
                    continue
                take = room  # one sentence longer than a sequence: cut it
            pieces.append((doc, pos, pos + take))
            used += take + 1
            pos += take
            if pos < doc.num_tokens or not cross_documents:
                yield flush()  # full (the next sentence did not fit) or the document ended
    if pieces:
        yield flush()


def _whole_sentences(doc, pos, room):
    """Tokens of the whole sentences from ``pos`` that fit in ``room`` (0 if not even one).

    ``pos`` is a sentence start, or inside a sentence that was cut: then the rest of it counts
    as one sentence."""
    starts = doc.sentence_starts
    if pos + room >= doc.num_tokens:
        return doc.num_tokens - pos
    k = np.searchsorted(starts, pos + room, side="right") - 1  # last start <= pos + room
    return int(starts[k] - pos) if starts[k] > pos else 0


def shard_instances(docs: list[Document], writer, fmt, short_seq_prob, rng, report):
    """All instances of one shard's documents in the given format."""
    if fmt not in FORMATS:
        raise UserError(f"unknown data.format {fmt!r}; choose from {FORMATS}")
    if fmt in ("segment_pair", "sop"):
        for index in range(len(docs)):
            yield from pair_instances(docs, index, writer, fmt, short_seq_prob, rng, report)
    else:
        yield from packed_instances(docs, writer, fmt == "full_sentences", short_seq_prob, rng)
