"""zhlm: Chinese BERT-family language models (BERT, RoBERTa-wwm, ERNIE 1.0, SpanBERT, ALBERT,
MacBERT) in JAX/Flax, from one encoder, one masking registry and one train step.

``zhlm.from_hf`` / ``zhlm.to_hf`` are imported lazily so that data preparation processes,
which never touch a model, do not pay for importing JAX and Flax.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("from_hf", "to_hf"):
        from zhlm import convert

        return getattr(convert, name)
    raise AttributeError(f"module 'zhlm' has no attribute {name!r}")
