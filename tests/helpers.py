"""Small things several test modules share: loading configs the way the CLI does."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")


def load_config(recipe, arg=None):
    """``configs/<recipe>.py:get_config(arg)`` (``arg=None``: the file's default variant)."""
    path = os.path.join(ROOT, "configs", f"{recipe}.py")
    spec = importlib.util.spec_from_file_location(f"configs_{recipe}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)


def synthetic_batch(batch_size, seq_len, vocab_size=21128, seed=0):
    """A batch with every field any recipe reads, shaped like the data pipeline's output.

    Words are runs of 1-3 tokens, phrases pairs of words, every third word an entity; the
    second half is segment B; the last few positions of odd rows are padding.
    """
    import numpy as np

    rs = np.random.RandomState(seed)
    shape = (batch_size, seq_len)
    ids = rs.randint(672, vocab_size, shape).astype(np.int32)
    mask = np.ones(shape, np.int32)
    mask[1::2, seq_len - 3 :] = 0
    ids[:, 0], ids[mask == 0] = 101, 0
    lengths = mask.sum(1)
    ids[np.arange(batch_size), lengths - 1] = 102
    types = np.zeros(shape, np.int32)
    types[:, seq_len // 2 :] = 1
    word = np.full(shape, -1, np.int32)
    phrase, entity = word.copy(), word.copy()
    for b in range(batch_size):
        pos, w = 1, 0
        while pos < lengths[b] - 1:
            n = min(rs.randint(1, 4), lengths[b] - 1 - pos)
            word[b, pos : pos + n] = w
            phrase[b, pos : pos + n] = w // 2 if w % 4 < 2 else -1
            entity[b, pos : pos + n] = w if w % 3 == 0 else -1
            pos, w = pos + n, w + 1
    similar = np.where(word >= 0, rs.randint(672, vocab_size, shape), -1).astype(np.int32)
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
