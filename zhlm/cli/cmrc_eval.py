"""``zhlm-cmrc-eval DATASET.json PREDICTIONS.json``: the official CMRC 2018 / DRCD scorer.

A drop-in for ``cmrc2018_evaluate.py`` (same arguments, same one-line JSON on stdout, the same
"Unanswered question" lines on stderr) that runs on Python 3 without NLTK; the definition lives
in :mod:`zhlm.finetune.metrics.cmrc2018`. Plain argparse rather than absl flags: it has two
positional paths and no config, exactly like the script it replaces.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from zhlm.finetune.metrics import cmrc2018


def run(argv: Sequence[str] | None = None) -> int:
    """Console entry point; ``argv`` defaults to ``sys.argv[1:]``. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="zhlm-cmrc-eval", description="Evaluation script for CMRC 2018 (and DRCD)."
    )
    parser.add_argument("dataset_file", help="dataset JSON, SQuAD-style or original CMRC layout")
    parser.add_argument("prediction_file", help="predictions JSON: {question_id: answer}")
    args = parser.parse_args(argv)
    try:
        score = cmrc2018.evaluate_files(args.dataset_file, args.prediction_file)
    except (OSError, ValueError, KeyError, TypeError) as error:
        # A bad path or a malformed file is the user's input, not our bug: say so in one line.
        print(f"zhlm-cmrc-eval: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    for question_id in score.unanswered:
        print(f"Unanswered question: {question_id}", file=sys.stderr)
    print(json.dumps(score.official_dict(args.prediction_file), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(run())
