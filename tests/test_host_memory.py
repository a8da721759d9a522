"""``zhlm.host_memory``: a program (``zhlm.cli.usage.run``, every program's entry) that runs JAX
on the CPU maps a step's large temporaries once, not afresh on every call; a process that only
imports the programs' modules, as the tests and tools do, keeps malloc as it is."""

import os
import platform
import subprocess
import sys

import pytest

# A jitted function with a 64 MiB temporary (the [2048, 8192] product feeds a second matmul),
# called five times after its first call; prints the minor page faults per call. The program's
# modules are imported first, as a console script imports its module before calling run().
PROGRAM = """
import resource, sys
import zhlm.cli.convert  # the programs' heaviest imports: JAX, Flax, orbax


def main(argv):
    import jax, jax.numpy as jnp
    f = jax.jit(lambda a, b: jnp.sum(jnp.tanh(a @ b) @ b.T))
    a, b = jnp.ones((2048, 64)), jnp.ones((64, 8192))
    f(a, b).block_until_ready()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        f(a, b).block_until_ready()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)


if sys.argv[1] == "program":
    from zhlm.cli import usage
    usage.run(main)
else:
    main(sys.argv)
"""


def _faults_per_call(mode: str) -> float:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    run = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return float(run.stdout.split()[-1])


@pytest.mark.slow
def test_a_program_on_the_cpu_reuses_a_steps_temporaries_and_an_import_changes_nothing():
    assert platform.libc_ver()[0] == "glibc", "CI runs Linux with glibc, whose mallopt is set"
    imported, program = _faults_per_call("imported"), _faults_per_call("program")
    assert imported > 4096, imported  # 64 MiB of fresh 4 KiB pages per call without the setting
    assert program * 50 < imported, (program, imported)
