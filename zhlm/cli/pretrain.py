"""``zhlm-pretrain``: train a recipe in a workdir, resuming whatever is there.

  zhlm-pretrain --config=configs/macbert.py:tiny --workdir=/tmp/zhlm
  zhlm-pretrain --config=configs/bert.py:base --workdir=gs://bucket/bert \
      --config.data.data_dir=gs://bucket/data --config.train.batch_size=4096

Without data options it trains on the People's Daily sample bundled in zhlm (prepared on the
first run and cached). Kept thin: flags in, :func:`zhlm.train.loop.train_and_evaluate` runs.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from zhlm.cli import failures, usage

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics.jsonl and TensorBoard.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    rerun = ": the same command continues from the last checkpoint (checkpoints are kept whole)"
    with failures.one_line("zhlm-pretrain", rerun):
        from zhlm.train.loop import train_and_evaluate

        train_and_evaluate(_CONFIG.value, _WORKDIR.value)


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
