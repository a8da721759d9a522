"""``zhlm.jax_platform``: on a machine with libtpu installed but no TPU (CI: the test extra
brings libtpu) the programs and the library's entry points run JAX on the CPU without libtpu's
initialisation errors; a platform the user chose, or JAX already started on, is kept, and the
library never takes the programs' host-memory setting."""

import os
import subprocess
import sys

import pytest

from zhlm import jax_platform


def _without_jax_platforms() -> dict:
    return {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}


def _run(code: str, *args) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=_without_jax_platforms(),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "TPU_WORKER_HOSTNAMES" not in run.stderr and "E0000" not in run.stderr, run.stderr
    return run


def test_cpu_chosen_only_where_libtpu_would_look_for_an_absent_tpu():
    if jax_platform.importlib.util.find_spec("libtpu") is None:
        pytest.fail("the test extra installs libtpu (jax[tpu]); this test needs it")
    assert jax_platform.cpu_wanted({})  # no TPU device files or GPU plugin on a CI machine
    assert not jax_platform.cpu_wanted({"JAX_PLATFORMS": "tpu"})


def test_a_jax_that_has_its_platform_already_is_left_alone():
    environ = {}
    assert jax_platform.jax_platform_chosen()  # here: conftest's JAX_PLATFORMS, read at import
    assert not jax_platform.cpu_unless_an_accelerator_is_here(environ)
    assert environ == {}


def test_cpu_runs_are_told_apart_from_accelerator_runs():
    assert jax_platform.runs_on_cpu({"JAX_PLATFORMS": "cpu"})
    assert not jax_platform.runs_on_cpu({"JAX_PLATFORMS": "tpu,cpu"})
    assert not jax_platform.runs_on_cpu({"JAX_PLATFORMS": "cuda"})
    assert jax_platform.runs_on_cpu({}) == (not jax_platform.accelerator_here())


def test_a_program_started_without_jax_platforms_prints_no_libtpu_errors():
    code = """
import os, sys
from zhlm.cli import usage
import jax  # a program's module imports JAX before run(): the choice must still reach it

def main(argv):
    print(os.environ["JAX_PLATFORMS"], jax.devices()[0].platform)

usage.run(main)
"""
    assert _run(code).stdout.split() == ["cpu", "cpu"]


# The library: JAX imported before zhlm (so it has read the environment already) but not
# started, then a fine-tuned model loaded and run; or JAX not imported at all before zhlm.
LIBRARY = """
import os, sys
if sys.argv[1] == "pipeline":
    import jax
    import zhlm
    print(zhlm.pipeline(sys.argv[2])(["房间很干净"])[0]["label"] in ("0", "1"))
else:
    import zhlm
    zhlm.from_hf
    import jax
    print(os.environ["JAX_PLATFORMS"])
print(jax.config.jax_platforms, jax.devices()[0].platform, "zhlm.host_memory" in sys.modules)
"""


def test_the_library_runs_on_the_cpu_without_libtpu_errors_or_the_programs_malloc(workdirs):
    assert _run(LIBRARY, "pipeline", workdirs["classification"]).stdout.split() == [
        "True", "cpu", "cpu", "False"
    ]  # fmt: skip
    assert _run(LIBRARY, "from_hf").stdout.split() == ["cpu", "cpu", "cpu", "False"]


def test_the_library_keeps_the_platform_the_user_chose():
    code = """
import jax
jax.config.update("jax_platforms", "cpu,tpu")  # the user's, though no TPU is here
import zhlm
zhlm.Predictor
print(jax.config.jax_platforms, "JAX_PLATFORMS" in __import__("os").environ)
"""
    assert _run(code).stdout.split() == ["cpu,tpu", "False"]
