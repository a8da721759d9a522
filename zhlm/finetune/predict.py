"""``predict(workdir, input, output)``: a fine-tuned model's predictions for new inputs.

Why a separate path from evaluation: new inputs have no labels (the readers are asked not to
require them), can be larger than a dev set (they are featurized, run and written chunk by
chunk, with a progress bar) and are wanted as records a person or a script reads: one JSON line
per input with its ``id`` and

* classification / pair: ``label`` and ``probabilities`` (label -> softmax probability);
* mrc: ``answer`` and ``score`` (the span's start + end logit; questions without any allowed
  span get ``""`` and no score);
* ner: ``text`` and ``entities`` (``type``, ``start``, ``end``, ``text``; end exclusive).

The model, its label set, tokenizer (the ``vocab.txt`` saved in ``best/``) and featurization
options come from the fine-tuning run; the input may be in any readable format
(``task.format`` of the run unless ``fmt`` says otherwise).
"""

from __future__ import annotations

import json

import jax

from zhlm import paths
from zhlm import workdir as layout
from zhlm.finetune import batching, kinds, tasks
from zhlm.finetune.train import load_finetuned
from zhlm.train.checkpoint import VOCAB

CHUNK = 1024  # inputs featurized and predicted at a time: memory stays flat for any file


def predict(source: str, input_file: str, output: str, fmt: str = "", text_fields=()) -> int:
    """Writes predictions for ``input_file`` to ``output`` (JSON lines) with the model of
    ``source`` (a fine-tuning workdir, or its ``best/``); returns how many were written."""
    from tqdm import tqdm

    best = source if layout.is_params_checkpoint(source) else str(layout.path(source, layout.BEST))
    if not layout.is_params_checkpoint(best):
        raise FileNotFoundError(f"{source}: no fine-tuned model (expected {layout.BEST}/)")
    model, params, config = load_finetuned(best)
    task = config.task
    task.unlock()  # unlike a user's config, the saved one may take the input's format
    task.format = fmt or task.format
    if text_fields:
        task.text_fields = tuple(text_fields)
    examples, _ = tasks.read_file(task, input_file, require_label=False)
    vocab = layout.path(best, VOCAB)  # the run's vocabulary, saved beside its parameters
    task.vocab = str(vocab) if vocab.is_file() else task.vocab
    tokenizer = tasks.load_tokenizer(task)
    forward = jax.jit(lambda p, b: model.apply({"params": p}, *_inputs(b)))
    lines = []
    with tqdm(total=len(examples), unit="input", desc="zhlm-predict") as bar:
        for begin in range(0, len(examples), CHUNK):
            chunk = examples[begin : begin + CHUNK]
            lines += _records(task, chunk, tokenizer, lambda b: forward(params, b), config)
            bar.update(len(chunk))
    paths.resolve(output).write_text("".join(lines), encoding="utf-8")
    return len(lines)


def _inputs(batch):
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def _records(task, examples, tokenizer, forward, config) -> list[str]:
    kind = kinds.get(task.kind)
    features = kind.featurize(examples, tokenizer, task, training=False)
    outputs = batching.run(
        lambda batch: kind.device_outputs(forward(batch), batch),
        features.arrays,
        config.train.batch_size,
    )
    predictions = kind.decode(features, outputs, examples, task)
    records = kind.records(examples, predictions, task)
    return [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
