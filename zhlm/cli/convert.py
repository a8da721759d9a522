"""``zhlm-convert``: any published model folder -> a zhlm checkpoint or a safetensors HF folder,
and a zhlm checkpoint -> a Hugging Face folder.

  zhlm-convert --input=MODEL_DIR --output=CKPT_DIR [--config=configs/macbert.py:base]
  zhlm-convert --input=MODEL_DIR --output=HF_DIR --to=hf
  zhlm-convert --input=CKPT_DIR --output=HF_DIR

``MODEL_DIR`` holds any format ``zhlm.convert.formats`` reads (model.safetensors,
pytorch_model.bin, flax_model.msgpack, tf_model.h5, a TF1 ``*.ckpt``); ``--to=hf`` rewrites it as
``config.json`` + ``model.safetensors``, so one conversion serves transformers users as well. A
zhlm checkpoint can only become a Hugging Face folder. ``--config`` names the recipe an imported
model is for (its heads, dtype, masking); the dimensions always come from the source. The
source's ``vocab.txt`` is copied beside the output. Problems are one clear line, no traceback.
"""

import os
import shutil
import sys

from absl import app, flags, logging
from ml_collections import config_flags

import zhlm
from zhlm import convert, workdir
from zhlm.convert import formats
from zhlm.models import build_model
from zhlm.train import checkpoint

_INPUT = flags.DEFINE_string("input", None, "Model folder (any format) or zhlm checkpoint.")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the converted model.")
_TO = flags.DEFINE_enum(
    "to",
    None,
    ["zhlm", "hf"],
    "Output for a model folder (default zhlm); a zhlm checkpoint always becomes an HF folder.",
)
_SEED = flags.DEFINE_integer("seed", 0, "Seed for heads the source does not have.")
_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Recipe for an imported model.", lock_config=True
)


def _from_checkpoint(source, output):
    variables, config = checkpoint.load_params(source)
    report = zhlm.to_hf(build_model(config), variables, config, output)
    vocab = formats.find_vocab(source)  # e.g. a fine-tuning run's best/vocab.txt
    if vocab:
        shutil.copyfile(vocab, os.path.join(output, checkpoint.VOCAB))
    return report, "Hugging Face folder"


def _from_folder(source, output, to):
    model, variables, config, report = convert.read_hf(source, _CONFIG.value, _SEED.value)
    print(f"zhlm-convert: read {report.format} weights from {source}")
    vocab = formats.find_vocab(source)
    if vocab:
        os.makedirs(output, exist_ok=True)
        copied = os.path.abspath(os.path.join(output, checkpoint.VOCAB))
        shutil.copyfile(vocab, copied)
        if "data" in config:  # the checkpoint names its own copy, not the source's
            config.data.vocab = copied
    if to == "hf":
        report.unused += zhlm.to_hf(model, variables, config, output).unused
        return report, "Hugging Face folder (safetensors)"
    checkpoint.save_params(output, variables, config)
    return report, "zhlm checkpoint"


def main(argv):
    logging.set_verbosity(logging.WARNING)  # orbax logs every step of a save at INFO
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not _INPUT.value or not _OUTPUT.value:
        raise app.UsageError("--input and --output are required")
    try:
        if workdir.is_params_checkpoint(_INPUT.value):
            if _TO.value == "zhlm":
                raise app.UsageError("--input is already a zhlm checkpoint (--to=hf or unset)")
            report, what = _from_checkpoint(_INPUT.value, _OUTPUT.value)
        else:
            report, what = _from_folder(_INPUT.value, _OUTPUT.value, _TO.value or "zhlm")
    except (convert.ConversionError, FileNotFoundError, KeyError) as e:
        print(f"zhlm-convert: {e}", file=sys.stderr)
        return 1
    for line in report.lines():
        print(f"zhlm-convert: {line}")
    print(f"zhlm-convert: wrote {what} {_OUTPUT.value}")
    return 0


def run():
    app.run(main)


if __name__ == "__main__":
    run()
