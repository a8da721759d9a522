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
pass. ``--max_seq_length`` and ``--batch_size`` change the run's length and batch (a length
above the model's position table is refused); the first line says which it uses and why, the
last how many records, how fast, what was compiled (compiled programs are kept for the next
run: ``ZHLM_COMPILATION_CACHE``, see ``zhlm.compilation_cache``), the share of real tokens and,
packed, the rows a batch. Inputs are packed several a row where the model's kind allows
(``--nopack``: one a row; the predictions are the same up to float rounding). ``--quiet``
leaves stdout empty. Kept thin: :func:`zhlm.finetune.predict.predict`.
"""

import re
import sys

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
_MAX_SEQ_LENGTH = flags.DEFINE_integer(
    "max_seq_length",
    0,
    "Tokens an input is cut to, [CLS] and [SEP] included, up to the model's position table "
    "(0: the fine-tuning run's, which a zhlm export keeps; else a Hugging Face folder's "
    "table, 512 at most).",
)
_BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", 0, "Inputs computed at once (0: the fine-tuning run's; 32 for a folder)."
)
_QUIET = flags.DEFINE_boolean(
    "quiet", False, "Nothing on stdout: the settings, report and summary lines go to stderr."
)
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
            max_seq_length=_MAX_SEQ_LENGTH.value,
            batch_size=_BATCH_SIZE.value,
            quiet=_QUIET.value,
            pack=_PACK.value,
        )
    print(
        f"zhlm-predict: {n} predictions in {_OUTPUT.value}, one per input record",
        file=sys.stderr if _QUIET.value else sys.stdout,
    )


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
