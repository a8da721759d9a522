"""``zhlm-finetune``: fine-tune a pretrained encoder on a task of a registered kind
(``zhlm.finetune.kinds``: classification, pair, MRC, NER).

  zhlm-finetune --config=configs/finetune/chnsenticorp.py --init=HF_OR_CKPT_DIR --workdir=/tmp/ft
  zhlm-finetune --config=configs/finetune/cmrc2018.py --init=/tmp/zhlm-bert --workdir=/tmp/cmrc \
      --config.train.seeds=3 --config.optim.peak_lr=3e-5

``--init`` is a Hugging Face folder, a zhlm parameter checkpoint (zhlm-convert's output), a
zhlm-pretrain workdir (its newest checkpoint) or a finished zhlm-finetune workdir (its ``best/``);
without it the encoder is random, with a warning.
The same command continues an interrupted run after its last finished epoch; a workdir with a
finished run (``results.json``) is refused unless ``--overwrite``.
Kept thin: flags in, :func:`zhlm.finetune.train.finetune` runs and writes results.json.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from zhlm.cli import failures, usage

_CONFIG = config_flags.DEFINE_config_file("config", None, "Task config file.", lock_config=True)
_INIT = flags.DEFINE_string(
    "init", None, "HF folder, zhlm checkpoint, zhlm-pretrain or finished zhlm-finetune workdir."
)
_WORKDIR = flags.DEFINE_string("workdir", None, "results.json, predictions and the best params.")
_OVERWRITE = flags.DEFINE_bool(
    "overwrite", False, "Replace a finished run in --workdir (else refused) or an interrupted one."
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
    rerun = (
        ": the same command continues after the last finished epoch (what progress/ keeps is whole)"
    )
    with failures.one_line("zhlm-finetune", rerun):
        from zhlm.finetune.train import finetune

        finetune(_CONFIG.value, _INIT.value, _WORKDIR.value, _OVERWRITE.value)


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
