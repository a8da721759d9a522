"""``zhlm.cli.usage``: ``--help`` / ``-h`` of a command lists its flags and every key of the chosen
config with its value and ``defaults.py``'s comment; a mistyped key or flag is one line naming
the closest; every declared key has a comment to show."""

import subprocess
import sys

import pytest
from helpers import ROOT

from zhlm import defaults
from zhlm.cli import usage


def command(name, *args):
    return subprocess.run(
        [sys.executable, "-m", f"zhlm.cli.{name}", *args], capture_output=True, text=True, cwd=ROOT
    )


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_the_flags_and_the_keys_of_the_config(flag):
    run = command("finetune", flag, "--config=configs/finetune/ocnli.py")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.startswith("``zhlm-finetune``"), run.stdout[:200]
    assert "  --init: " in run.stdout and "  --workdir: " in run.stdout
    assert "    task.max_seq_length = 128  # tokens per sequence" in run.stdout, run.stdout
    assert "    optim.peak_lr = " in run.stdout and "Traceback" not in run.stderr


def test_help_without_a_config_lists_the_base_schema():
    run = command("pretrain", "--help")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "values of the base schema" in run.stdout
    assert "    masking.scheme = " in run.stdout and "    train.restart = False  # " in run.stdout


def test_a_mistyped_key_or_flag_is_one_line_naming_the_closest():
    run = command("finetune", "--config=configs/finetune/ocnli.py", "--workdir=/nonexistent",
                  "--config.train.epoch=3")  # fmt: skip
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert run.stderr.strip().splitlines() == [
        "zhlm-finetune: unknown key config.train.epoch (closest: config.train.epochs); "
        "`zhlm-finetune --help --config=configs/finetune/ocnli.py` lists the keys"
    ]
    run = command("predict", "--workdr=/tmp", "--input=a", "--output=b")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
    assert "(closest: --workdir)" in run.stderr and len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("finetune", [False, True])
def test_every_declared_key_has_a_comment(finetune):
    config = defaults.get_finetune_config() if finetune else defaults.get_base_config()
    missing = [
        f"{section}.{key}"
        for section, values in config.items()
        if hasattr(values, "items")
        for key in values
        if not usage._comment(section, key, finetune)
    ]
    assert not missing, f"declare these with a one-line comment in zhlm/defaults.py: {missing}"
