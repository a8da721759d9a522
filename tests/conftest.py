"""Test-session settings that must precede the first ``import jax``.

XLA's CPU backend spends most of a small test's time in LLVM optimisation of kernels that then
run for microseconds; level 0 keeps IEEE semantics (results are the same to the last bit in the
parity tests) and cuts compile time about 3x. Benchmarks (tools/bench.py) never set it.
"""

import os
import tempfile

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
).strip()

# libtpu (the test extra brings it for tests/test_compile_plan.py) makes every process try a TPU
# first: log errors, take /tmp/libtpu_lockfile. The tests' devices are CPUs (compile-only TPU
# topologies do not need the TPU backend); child processes inherit this.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Datasets prepared on the fly by the loop and the tables are cached for the whole session (and
# its child processes), never in the user's ~/.cache.
os.environ["ZHLM_CACHE"] = tempfile.mkdtemp(prefix="zhlm-test-cache-")
