"""``zhlm-convert``: a Hugging Face model folder <-> a zhlm parameter checkpoint.

  zhlm-convert --input=HF_DIR --output=CKPT_DIR [--config=configs/macbert.py:base]
  zhlm-convert --input=CKPT_DIR --output=HF_DIR

The direction follows from what ``--input`` holds. ``--config`` names the recipe an imported
model is for (its heads, dtype, masking); the dimensions always come from the HF folder.
Problems are reported as one clear message, not a traceback.
"""

import sys

from absl import app, flags, logging
from ml_collections import config_flags

from zhlm import convert
from zhlm.models import build_model
from zhlm.train import checkpoint

_INPUT = flags.DEFINE_string("input", None, "HF model folder or zhlm parameter checkpoint.")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the converted model.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed for heads the source does not have.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Recipe for an imported model.", lock_config=True
)


def main(argv):
    logging.set_verbosity(logging.WARNING)  # orbax logs every step of a save at INFO
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _INPUT.value or not _OUTPUT.value:
        raise app.UsageError("--input and --output are required")
    try:
        if checkpoint.is_params_checkpoint(_INPUT.value):
            variables, config = checkpoint.load_params(_INPUT.value)
            report = convert.to_hf(build_model(config), variables, config, _OUTPUT.value)
            lines, what = report.lines(), "Hugging Face folder"
        else:
            _, variables, config, report = convert.read_hf(_INPUT.value, _CONFIG.value, _SEED.value)
            checkpoint.save_params(_OUTPUT.value, variables, config)
            lines, what = report.lines(), "zhlm checkpoint"
    except (convert.ConversionError, FileNotFoundError, KeyError) as e:
        print(f"zhlm-convert: {e}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"zhlm-convert: {line}")
    print(f"zhlm-convert: wrote {what} {_OUTPUT.value}")
    return 0


def run():
    app.run(main)


if __name__ == "__main__":
    run()
