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
import numpy as np

from zhlm import paths
from zhlm import workdir as layout
from zhlm.finetune import mrc, ner, ner_features, tasks
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


def _run(arrays, batch_size, forward):
    """The forward pass over ``arrays`` in batches of ``batch_size`` rows (the last padded)."""
    n = len(arrays["input_ids"])
    outputs = []
    for begin in range(0, n, batch_size):
        rows = np.arange(begin, min(begin + batch_size, n))
        padded = np.pad(rows, (0, batch_size - len(rows)))
        out = jax.device_get(forward({k: v[padded] for k, v in arrays.items()}))
        outputs.append({k: v[: len(rows)] for k, v in out.items()})
    return {k: np.concatenate([o[k] for o in outputs]) for k in outputs[0]}


def _records(task, examples, tokenizer, forward, config) -> list[str]:
    size = config.train.batch_size
    if task.kind == "mrc":
        args = (tokenizer, task.max_seq_length, task.doc_stride, task.max_query_length)
        features = mrc.mrc_features(examples, *args)
        out = _run(features.arrays, size, forward)
        answers = mrc.best_answers(
            features, examples, out["start_logits"], out["end_logits"], task.n_best_size,
            task.max_answer_length,
        )  # fmt: skip
        records = [
            dict(id=qid, answer=text, **({"score": score} if text else {}))
            for qid, (text, score) in answers.items()
        ]
    elif task.kind == "ner":
        stride = ner_features.task_stride(task)
        features = ner_features.ner_features(
            examples, tokenizer, task.labels, task.max_seq_length, stride, "ignore"
        )
        out = _run(features.arrays, size, forward)
        tags = ner_features.merge(features, np.argmax(out["logits"], -1))
        records = [
            dict(id=e.guid, text=e.text, entities=ner.prediction_records(e, t))
            for e, t in zip(examples, tags, strict=True)
        ]
    else:
        arrays = tasks.classification_features(
            examples, tokenizer, task.labels, task.max_seq_length
        )
        logits = _run({k: v for k, v in arrays.items() if k != "label"}, size, forward)["logits"]
        probs = np.asarray(jax.nn.softmax(logits, -1))
        records = [
            dict(
                id=e.guid,
                label=task.labels[int(np.argmax(p))],
                probabilities={label: float(q) for label, q in zip(task.labels, p, strict=True)},
            )
            for e, p in zip(examples, probs, strict=True)
        ]
    return [json.dumps(r, ensure_ascii=False) + "\n" for r in records]
