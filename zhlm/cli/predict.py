"""``zhlm-predict``: a fine-tuned model's predictions for new inputs, as JSON lines.

  zhlm-predict --workdir=/tmp/chnsenticorp --input=reviews.tsv --output=/tmp/preds.jsonl
  zhlm-predict --workdir=/tmp/msra --input=sentences.jsonl --format=spans_jsonl --output=ner.jsonl

``--workdir`` is a zhlm-finetune workdir (its ``best/``) or the ``best/`` folder itself; the
input is read like the run's data (``--format`` and ``--text_fields`` override the run's), with
no labels needed. Predictions are written as the input is read, in input order; run again with
the same ``--output``, a stopped run continues after its last complete record. An input that
gives no record exits non-zero. Kept thin: :func:`zhlm.finetune.predict.predict`.
"""

import sys

from absl import app, flags, logging

from zhlm.cli import usage

_WORKDIR = flags.DEFINE_string("workdir", None, "zhlm-finetune workdir or its best/ folder.")
_INPUT = flags.DEFINE_string("input", None, "File (or datasets folder) of inputs to predict.")
_OUTPUT = flags.DEFINE_string(
    "output", None, "Where to write the JSON lines; an existing one is continued, not overwritten."
)
_FORMAT = flags.DEFINE_string("format", "", "Input format (default: the run's task.format).")
_TEXT_FIELDS = flags.DEFINE_list("text_fields", [], "Input text columns (names or positions).")
flags.mark_flags_as_required(["workdir", "input", "output"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    from zhlm.finetune.predict import predict

    try:
        n = predict(_WORKDIR.value, _INPUT.value, _OUTPUT.value, _FORMAT.value, _TEXT_FIELDS.value)
    except (ValueError, FileNotFoundError, KeyError) as e:
        sys.exit(f"zhlm-predict: {e}")
    print(f"zhlm-predict: {n} predictions in {_OUTPUT.value}, one per input record")


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
