"""A synthetic pretraining batch with every field any recipe reads, for tests and benchmarks.

Why it exists: the train step, the masking schemes and the benchmarks need a batch shaped like
the data pipeline's output (DESIGN.md's batch fields) without preparing a dataset; one builder
keeps the tests and ``tools/bench.py`` on the same conventions. Masking and the step have static
shapes, so what they cost depends on the shapes, not on which tokens are drawn.
"""

import numpy as np

CLS, SEP, PAD = 101, 102, 0  # the Google Chinese vocab's [CLS], [SEP], [PAD]
FIRST_CJK = 671  # 一, the vocab's first CJK character: ids below are specials, [unusedN], ASCII
# Share of words of 1, 2, 3 and 4 tokens (one token per character) in the gold segmentation of
# People's Daily 1998-01 (corpus/peoples_daily_199801_pos.txt, first 3,000 lines, punctuation
# counted as words: 46.5%, 45.7%, 5.0%, 2.8% of 4 or more).
CHINESE_WORD_LENGTHS = (0.47, 0.46, 0.05, 0.02)


def _words(rs, n, probs):
    """Word ids 0, 1, ... for ``n`` tokens cut into words of ``1..len(probs)`` tokens."""
    sizes = rs.choice(len(probs), size=n, p=probs) + 1
    return np.repeat(np.arange(n), sizes)[:n]


def synthetic_batch(
    batch_size, seq_len, vocab_size=21128, seed=0, word_lengths=CHINESE_WORD_LENGTHS, padding=3
):
    """A dict of int32 numpy arrays: ``[CLS] A [SEP] B [SEP]`` segment pairs, as the pipeline
    writes them.

    Segment B starts after the ``[SEP]`` at ``seq_len // 2 - 1``; the last ``padding`` positions
    of odd rows are padding (token type 0, attention 0). ``word_ids`` number the words of each
    sequence (lengths drawn from ``word_lengths``) and are -1 on [CLS], [SEP] and padding;
    ``phrase_ids`` join words 0-1, 4-5, 8-9, ... into phrases (id ``word // 2``), every third
    word is an entity (``entity_ids`` = its word id), all with -1 elsewhere; ``similar_ids``
    is a random candidate on every word token, -1 elsewhere; ``sentence_label`` is [B] of 0/1.
    """
    rs = np.random.RandomState(seed)
    shape = (batch_size, seq_len)
    mask = np.ones(shape, np.int32)
    mask[1::2, seq_len - padding :] = 0
    lengths = mask.sum(1)
    ids = rs.randint(FIRST_CJK, vocab_size, shape).astype(np.int32)
    ids[mask == 0] = PAD
    sep = seq_len // 2 - 1
    ids[:, 0], ids[:, sep] = CLS, SEP
    ids[np.arange(batch_size), lengths - 1] = SEP
    types = ((np.arange(seq_len) > sep) & (mask == 1)).astype(np.int32)
    word = np.full(shape, -1, np.int32)
    for b in range(batch_size):
        first = _words(rs, sep - 1, word_lengths)
        word[b, 1:sep] = first
        word[b, sep + 1 : lengths[b] - 1] = _words(rs, lengths[b] - sep - 2, word_lengths)
        word[b, sep + 1 : lengths[b] - 1] += first[-1] + 1  # unique within the sequence
    phrase = np.where((word >= 0) & (word % 4 < 2), word // 2, -1).astype(np.int32)
    entity = np.where((word >= 0) & (word % 3 == 0), word, -1).astype(np.int32)
    similar = np.where(word >= 0, rs.randint(FIRST_CJK, vocab_size, shape), -1).astype(np.int32)
    return dict(
        input_ids=ids,
        token_type_ids=types,
        attention_mask=mask,
        word_ids=word,
        phrase_ids=phrase,
        entity_ids=entity,
        similar_ids=similar,
        sentence_label=rs.randint(0, 2, batch_size).astype(np.int32),
    )
