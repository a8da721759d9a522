"""zhlm: Chinese BERT-family language models (BERT, RoBERTa-wwm, ERNIE 1.0, SpanBERT, ALBERT,
MacBERT) in JAX/Flax, from one encoder, one masking registry and one train step.

``zhlm.from_hf`` / ``zhlm.to_hf`` and ``zhlm.Predictor`` / ``zhlm.pipeline`` (a fine-tuned
model predicting in memory) are imported lazily so that data preparation processes, which never
touch a model, do not pay for importing JAX and Flax. Each of them first settles JAX's
platform as the programs do (``zhlm.jax_platform``: the CPU where libtpu is installed but no
TPU is here, unless the user or JAX chose already); the programs' host-memory setting stays
theirs.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("from_hf", "Predictor"):
        from zhlm import jax_platform

        jax_platform.cpu_unless_an_accelerator_is_here()
    if name == "from_hf":
        from zhlm import convert

        return convert.from_hf
    if name == "Predictor":
        from zhlm.finetune import predictor

        return predictor.Predictor
    raise AttributeError(f"module 'zhlm' has no attribute {name!r}")


def to_hf(model, variables, config, path, vocab: str = ""):
    """A Hugging Face folder of ``model`` (``zhlm.convert.to_hf``, with the tokenizer files of
    ``vocab``, empty: the config's); a fine-tuned model (``config.task``) exports as its task
    kind says (architecture, head, label names)."""
    from zhlm import convert

    task = None
    if "task" in config:
        from zhlm.convert.writer import TaskExport
        from zhlm.finetune import kinds

        export = kinds.get(config.task.kind).export
        task = TaskExport(export.hf_class, export.head, export.config(config.task))
    return convert.to_hf(model, variables, config, path, task, vocab)


def pipeline(
    source: str, kind: str = "", max_seq_length: int = 0, batch_size: int = 0, pack: bool = True
):
    """A :class:`zhlm.Predictor` of ``source``, a zhlm-finetune workdir, its ``best/`` or a
    Hugging Face task folder (``kind`` picks among kinds of one class, e.g. ``pair``), cutting
    inputs to ``max_seq_length`` tokens and computing ``batch_size`` at once (0: the run's),
    several inputs a row unless ``pack`` is False:
    ``zhlm.pipeline(workdir)("一段文字")`` (see ``zhlm.finetune.predictor``)."""
    from zhlm import jax_platform

    jax_platform.cpu_unless_an_accelerator_is_here()
    from zhlm.finetune import predictor

    return predictor.pipeline(source, kind, max_seq_length, batch_size, pack)
