"""``zhlm.cli``: on a machine with libtpu installed but no TPU (CI: the test extra brings libtpu)
the programs run on the CPU without libtpu's initialisation errors; a ``JAX_PLATFORMS`` the
user set is kept."""

import os
import subprocess
import sys

import pytest

from zhlm import cli


def test_cpu_chosen_only_where_libtpu_would_look_for_an_absent_tpu():
    if cli.importlib.util.find_spec("libtpu") is None:
        pytest.fail("the test extra installs libtpu (jax[tpu]); this test needs it")
    environ = {}
    cli.cpu_unless_an_accelerator_is_here(environ)
    assert environ == {"JAX_PLATFORMS": "cpu"}  # no TPU device files on a CI machine
    environ = {"JAX_PLATFORMS": "tpu"}
    cli.cpu_unless_an_accelerator_is_here(environ)
    assert environ == {"JAX_PLATFORMS": "tpu"}


def test_a_program_started_without_jax_platforms_prints_no_libtpu_errors():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    code = "import zhlm.cli, jax; print(jax.devices()[0].platform)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "cpu"
    assert "TPU_WORKER_HOSTNAMES" not in run.stderr and "E0000" not in run.stderr, run.stderr


def test_cpu_runs_are_told_apart_from_accelerator_runs():
    assert cli.runs_on_cpu({"JAX_PLATFORMS": "cpu"})
    assert not cli.runs_on_cpu({"JAX_PLATFORMS": "tpu,cpu"})
    assert not cli.runs_on_cpu({"JAX_PLATFORMS": "cuda"})
    assert cli.runs_on_cpu({}) == (not cli.accelerator_here())
