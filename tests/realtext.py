"""Batches of real Chinese text for the masking tests and benchmark, built without zhlm.data.

The statistical tests must see real word-length, entity and phrase distributions, but should not
depend on the data pipeline (tested on its own), so this module is a small self-contained
builder: People's Daily 1998-01 with its GOLD segmentation and POS tags, and CLUECorpusSmall
segmented by jieba. Tokens are looked up per word in the Google Chinese vocab (NFKC, lower case,
one token per CJK character, greedy longest-match WordPiece for other runs), so every token
belongs to exactly one word, as the pipeline guarantees.

Units from the gold tags: an entity is a word tagged nr / ns / nt (a surname and given name,
consecutive nr, form one person); a phrase is a run of 2-4 consecutive nominal words (n, vn, an,
nz, j, nr, ns, nt), so entities sit inside phrases and the knowledge scheme's nesting is
exercised. Similar words come from the Cilin synonym groups (same token count), else a random
corpus word of the same token count, as the pipeline specifies.

Sequences are segment pairs ``[CLS] A [SEP] B [SEP]`` packed to ``seq_len`` at word boundaries,
10% of them shorter (BERT's short_seq_prob), padded with id 0, word id -1.
"""

import functools
import itertools
import os
import unicodedata

import numpy as np

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
VOCAB = os.path.join(DATA, "vocab", "google_zh_vocab.txt")
PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
_NOMINAL = {"n", "vn", "an", "nz", "j", "nr", "ns", "nt"}
_ENTITY = {"nr", "ns", "nt"}


@functools.cache
def vocab():
    with open(VOCAB, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    return tokens, {t: i for i, t in enumerate(tokens)}


def _is_cjk(ch):
    return 0x4E00 <= ord(ch) <= 0x9FFF or 0x3400 <= ord(ch) <= 0x4DBF


@functools.cache
def tokenize_word(word):
    """Token ids of one word (cached: the corpora repeat words a lot)."""
    _, index = vocab()
    text = unicodedata.normalize("NFKC", word).lower()
    ids, run = [], ""
    for ch in text + " ":
        if _is_cjk(ch) or ch.isspace():
            ids += _wordpiece(run, index) if run else []
            run = ""
            if _is_cjk(ch):
                ids.append(index.get(ch, UNK))
        else:
            run += ch
    return tuple(ids)


def _wordpiece(run, index):
    out, start = [], 0
    while start < len(run):
        for end in range(len(run), start, -1):
            piece = run[start:end] if start == 0 else "##" + run[start:end]
            if piece in index:
                out.append(index[piece])
                start = end
                break
        else:
            return [UNK]
    return out


def peoples_daily_words():
    """Paragraphs as lists of (word, tag), People's Daily gold segmentation."""
    path = os.path.join(DATA, "corpus", "peoples_daily_199801_pos.txt")
    with open(path, encoding="utf-8") as f:
        for line in f:
            pairs = [w.rsplit("/", 1) for w in line.split()]
            words = [(w, t) for w, t in pairs if tokenize_word(w)]
            if words:
                yield words


def clue_words():
    """Documents' lines segmented by jieba (tag '' : no entity or phrase information)."""
    import jieba

    jieba.setLogLevel(60)
    path = os.path.join(DATA, "corpus", "clue_small_docs.txt")
    with open(path, encoding="utf-8") as f:
        for line in f:
            words = [(w, "") for w in jieba.lcut(line.strip(), HMM=False) if tokenize_word(w)]
            if words:
                yield words


def _units(tags):
    """Entity and phrase number of each word (-1: none) from POS tags."""
    n = len(tags)
    entity, phrase = [-1] * n, [-1] * n
    for i, t in enumerate(tags):
        if t in _ENTITY:
            same_person = t == "nr" and i and tags[i - 1] == "nr"
            entity[i] = entity[i - 1] if same_person else i
    i = 0
    while i < n:
        j = i
        while j < n and tags[j] in _NOMINAL and j - i < 4:
            j += 1
        if j - i >= 2:
            phrase[i:j] = [i] * (j - i)
        i = max(j, i + 1)
    return entity, phrase


@functools.cache
def _synonyms():
    """Word -> same-token-count synonyms from Cilin's '=' (synonym) groups."""
    out = {}
    with open(os.path.join(DATA, "lexicons", "cilin_synonyms.txt"), encoding="utf-8") as f:
        for line in f:
            code, _, rest = line.partition(" ")
            if not code.endswith("="):
                continue
            group = rest.split()
            for w in group:
                out.setdefault(w, []).extend(
                    g for g in group if g != w and len(tokenize_word(g)) == len(tokenize_word(w))
                )
    return out


def _flatten(paragraphs, rng):
    """Corpus-wide token arrays: ids, word / entity / phrase number (global, -1: none), similar
    ids, and each word's first-token offset. Per-word lists, repeated out to tokens by numpy."""
    words, entity, phrase = [], [], []
    for words_tags in paragraphs:
        e_of, p_of = _units([t for _, t in words_tags])
        base = len(words)
        words += [w for w, _ in words_tags]
        entity += [base + e if e >= 0 else -1 for e in e_of]
        phrase += [base + p if p >= 0 else -1 for p in p_of]
    tokens = [tokenize_word(w) for w in words]
    lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
    pools = {}
    for w in sorted(set(words)):
        pools.setdefault(len(tokenize_word(w)), []).append(w)
    synonyms = _synonyms()
    similar = []
    for w, r in zip(words, rng.integers(1 << 30, size=len(words)).tolist(), strict=True):
        pool = synonyms.get(w) or pools[len(tokenize_word(w))]
        similar.append(tokenize_word(pool[r % len(pool)]))
    flat = [np.fromiter(itertools.chain.from_iterable(t), np.int32) for t in (tokens, similar)]
    per_word = [np.arange(len(words)), np.asarray(entity), np.asarray(phrase)]
    word, entity, phrase = (np.repeat(a, lengths).astype(np.int32) for a in per_word)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    return (flat[0], word, entity, phrase, flat[1]), starts


def build(corpus="peoples_daily", seq_len=128, seed=0):
    """All sequences of a corpus as a dict of int32 numpy arrays [N, seq_len]."""
    rng = np.random.default_rng(seed)
    paragraphs = peoples_daily_words() if corpus == "peoples_daily" else clue_words()
    (ids, word, entity, phrase, similar), starts = _flatten(paragraphs, rng)
    num_words = len(starts) - 1
    rows, i = [], 0
    while i < num_words:
        target = seq_len - 3 if rng.random() >= 0.1 else int(rng.integers(2, seq_len - 2))
        j = max(int(np.searchsorted(starts, starts[i] + target, side="right")) - 1, i + 1)
        lo, hi = starts[i], min(starts[j], starts[i] + seq_len - 3)  # an overlong word is cut
        cut = starts[int(rng.integers(i + 1, j))] if j - i > 1 else hi
        rows.append((lo, cut, hi))
        i = j
    f = {k: np.full((len(rows), seq_len), fill, np.int32) for k, fill in _FIELDS.items()}
    for r, (lo, cut, hi) in enumerate(rows):
        a, b = cut - lo, hi - cut
        n = a + b + 2 + (b > 0)  # [CLS] A [SEP] (B [SEP])
        f["input_ids"][r, :n] = [CLS, *ids[lo:cut], SEP, *ids[cut:hi], SEP][:n]
        f["token_type_ids"][r, a + 2 : n] = 1
        f["attention_mask"][r, :n] = 1
        for name, src in (("word_ids", word), ("entity_ids", entity), ("phrase_ids", phrase)):
            local = np.where(src[lo:hi] >= 0, src[lo:hi] - word[lo], -1)  # unique, from 0
            f[name][r, 1 : a + 1], f[name][r, a + 2 : a + b + 2] = local[:a], local[a:]
        f["similar_ids"][r, 1 : a + 1] = similar[lo:cut]
        f["similar_ids"][r, a + 2 : a + b + 2] = similar[cut:hi]
    f["sentence_label"] = rng.integers(2, size=len(rows)).astype(np.int32)
    return f


_FIELDS = {
    "input_ids": PAD,
    "token_type_ids": 0,
    "attention_mask": 0,
    "word_ids": -1,
    "phrase_ids": -1,
    "entity_ids": -1,
    "similar_ids": -1,
}


@functools.cache
def cached(corpus="peoples_daily", seq_len=128):
    """``build`` once per process, and once per machine through an .npz beside the temp dir."""
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"zhlm_realtext_{corpus}_{seq_len}_v1.npz")
    if os.path.exists(path):
        with np.load(path) as z:
            return {k: z[k] for k in z.files}
    batch = build(corpus, seq_len)
    tmp = f"{path}.{os.getpid()}.npz"
    np.savez(tmp, **batch)
    os.replace(tmp, path)
    return batch
