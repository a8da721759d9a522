"""``zhlm-convert``: any published model folder -> a zhlm checkpoint or a safetensors HF folder,
and any zhlm folder ``--init`` reads -> a Hugging Face folder.

  zhlm-convert --input=MODEL_DIR --output=CKPT_DIR [--config=configs/macbert.py:base]
  zhlm-convert --input=MODEL_DIR --output=HF_DIR --to=hf
  zhlm-convert --input=CKPT_DIR_OR_WORKDIR --output=HF_DIR

A zhlm folder is a parameter checkpoint, a zhlm-pretrain workdir (its newest step that reads) or
a zhlm-finetune workdir (its ``best/``).

``MODEL_DIR`` holds any format ``zhlm.convert.formats`` reads (model.safetensors,
pytorch_model.bin, flax_model.msgpack, tf_model.h5, a TF1 ``*.ckpt``); ``--to=hf`` rewrites it as
``config.json`` + ``model.safetensors``, so one conversion serves transformers users as well. A
zhlm folder can only become a Hugging Face folder. ``--config`` names the recipe an imported
model is for (its heads, dtype, masking); the dimensions always come from the source. The
source's vocabulary (``vocab.txt``, or a WordPiece ``tokenizer.json``) goes with the output; a
Hugging Face output gets the tokenizer files ``AutoTokenizer`` reads
(``zhlm.convert.tokenizer_files``). Problems are one clear line, no traceback.
"""

import os
import shutil
import tempfile

from absl import app, flags, logging
from ml_collections import config_flags

import zhlm
from zhlm import convert, paths, run_files
from zhlm.cli import failures, usage
from zhlm.convert import tokenizer_files
from zhlm.errors import UserError
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


def _zhlm_source(folder) -> str | None:
    """What ``--init`` would read from a zhlm folder: a parameter checkpoint or pretraining
    workdir as it is, a fine-tuning workdir's ``best/``; None for any other folder."""
    best = run_files.path(folder, run_files.BEST)
    if run_files.is_params_checkpoint(best):
        return str(best)
    if run_files.is_params_checkpoint(folder) or run_files.is_pretraining(folder):
        return folder
    return None


def _check_writable(output) -> None:
    """Refuses, before the input is read, an output that cannot be written (a read-only disk,
    another user's folder, a file): a file is made and removed in it, or in the nearest folder
    above it that exists."""
    if paths.is_remote(output):
        return
    folder = os.path.abspath(output)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UserError(
            f"cannot write to --output={output} ({e.strerror or e}): give a folder this user "
            "can write to"
        ) from e


def _from_zhlm(source, output):
    loaded = checkpoint.load(source)  # a pretraining workdir: its newest step that reads
    print(f"zhlm-convert: read {loaded.description}")
    model, variables = build_model(loaded.config), {"params": loaded.params}
    report = zhlm.to_hf(model, variables, loaded.config, output, loaded.vocab)
    return report, "Hugging Face folder"


def _from_folder(source, output, to):
    model, variables, config, report = convert.read_hf(source, _CONFIG.value, _SEED.value)
    print(f"zhlm-convert: read {report.format} weights from {source}")
    vocab = tokenizer_files.find_vocab(source)
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
    interrupted = f": {_OUTPUT.value} may be incomplete; run the same command again"
    with failures.one_line("zhlm-convert", interrupted):
        source = _zhlm_source(_INPUT.value)
        if source is not None and _TO.value == "zhlm":
            raise app.UsageError("--input is already zhlm's: convert it with --to=hf or unset")
        _check_writable(_OUTPUT.value)
        if source is not None:
            report, what = _from_zhlm(source, _OUTPUT.value)
        else:
            report, what = _from_folder(_INPUT.value, _OUTPUT.value, _TO.value or "zhlm")
    for line in report.lines():
        print(f"zhlm-convert: {line}")
    print(f"zhlm-convert: wrote {what} {_OUTPUT.value}")
    return 0


def run():
    usage.run(main)


if __name__ == "__main__":
    run()
