"""``zhlm-predict``: a fine-tuned model's predictions for new inputs, as JSON lines.

  zhlm-predict --workdir=/tmp/chnsenticorp --input=reviews.tsv --output=/tmp/preds.jsonl
  zhlm-predict --workdir=/tmp/msra --input=sentences.jsonl --format=spans_jsonl --output=ner.jsonl

  zhlm-predict --workdir=/tmp/chnsenticorp --input=reviews.txt --output=/tmp/preds.jsonl

``--workdir`` is a zhlm-finetune workdir (its ``best/``), the ``best/`` folder itself or a
Hugging Face task folder (``BertForSequenceClassification`` and the like: its labels, head and
vocabulary); the
input's format is ``--format``, else its extension's (``.txt`` is plain text, one input a
line; ``.tsv .csv .jsonl .json .parquet``), else the run's; its fields are the run's unless
``--text_fields`` names them; no labels are needed. Each output line holds the input and its
prediction, in input order; run again with the same ``--output``, a stopped run continues
after its last complete record. An input that gives no record exits non-zero with what to
pass. Inputs are packed several a row where the model's kind allows (``--nopack``: one a
row; the predictions are the same up to float rounding). Kept thin:
:func:`zhlm.finetune.predict.predict`.
"""

import re

from absl import app, flags, logging

from zhlm.cli import failures, usage

_WORKDIR = flags.DEFINE_string(
    "workdir", None, "zhlm-finetune workdir, its best/ folder or a Hugging Face task folder."
)
_INPUT = flags.DEFINE_string("input", None, "File (or datasets folder) of inputs to predict.")
_OUTPUT = flags.DEFINE_string(
    "output", None, "Where to write the JSON lines; an existing one is continued, not overwritten."
)
_FORMAT = flags.DEFINE_string(
    "format", "", "Input format (default: the input's extension's, else the run's task.format)."
)
_TEXT_FIELDS = flags.DEFINE_list("text_fields", [], "Input text columns (names or positions).")
_PACK = flags.DEFINE_bool(
    "pack", True, "Several inputs per row, each kept apart (--nopack: one input a row)."
)
flags.mark_flags_as_required(["workdir", "input", "output"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    rerun = (
        f": the same command continues after the last complete record in {_OUTPUT.value} "
        "(each is written whole)"
    )
    if "://" in _OUTPUT.value:  # a cloud object, uploaded whole at the end: nothing to continue
        rerun = f": nothing was written to {_OUTPUT.value}; run the same command again"
    with failures.one_line("zhlm-predict", rerun, own_flags):
        from zhlm.finetune.predict import predict

        n = predict(
            _WORKDIR.value,
            _INPUT.value,
            _OUTPUT.value,
            _FORMAT.value,
            _TEXT_FIELDS.value,
            pack=_PACK.value,
        )
    print(f"zhlm-predict: {n} predictions in {_OUTPUT.value}, one per input record")


def own_flags(message: str) -> str:
    """``message`` with zhlm-predict's flags for the ``--config.task`` keys the readers name
    (they serve zhlm-finetune too); the label's is dropped, since predicting reads no label."""
    message = re.sub(r",? ?(and )?--config\.task\.label_field=\S+", "", message)
    return re.sub(r"(--)?config\.task\.(format|text_fields)=", r"--\2=", message)


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
