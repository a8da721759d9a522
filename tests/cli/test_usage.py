"""``zhlm.cli.usage``: ``--help`` / ``-h`` of a command lists its flags and every key of the chosen
config with its value and ``defaults.py``'s comment; a mistyped key or flag is one line naming
the closest; every declared key has a comment to show."""

import os
import shutil
import site
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


@pytest.mark.slow
def test_configs_by_name_from_any_directory_after_a_non_editable_install(tmp_path):
    """``pip install .`` (not ``-e``; the build backend comes from the package index) of a copy
    of the project into a fresh virtual environment that sees the tests' dependencies: from
    another directory, ``bert:tiny`` and
    ``finetune/ocnli`` load and the commands take ``--config=NAME``."""
    source = tmp_path / "src"
    skip = shutil.ignore_patterns(".git", "tests", "tools", "*.egg-info", "build", "__pycache__")
    shutil.copytree(ROOT, source, ignore=skip)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    # The dependencies are those of the environment running the tests (a virtual one too): its
    # site-packages follow the new environment's own, whose zhlm comes first.
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    with open(os.path.join(purelib, "tests-dependencies.pth"), "w", encoding="utf-8") as f:
        f.write("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", str(source)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-2000:]
    shutil.rmtree(source)  # nothing may come from the copy any more
    away = tmp_path / "elsewhere"
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = (
        "import zhlm; from zhlm import config_files; print(zhlm.__file__); "
        "print(config_files.load('bert:tiny').model.size, "
        "config_files.load('finetune/ocnli').task.name)"
    )
    run = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=away, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    where, loaded = run.stdout.strip().splitlines()
    assert str(venv) in where and loaded == "tiny ocnli"
    helped = subprocess.run(
        [str(venv / "bin" / "zhlm-pretrain"), "--config=bert:tiny", "--help"],
        capture_output=True, text=True, cwd=away, env=env,
    )  # fmt: skip
    assert helped.returncode == 0, helped.stderr[-2000:]
    assert (
        "/zhlm/configs/bert.py:tiny" in helped.stdout and "    model.size = 'tiny'" in helped.stdout
    )
