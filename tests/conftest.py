"""Test-session settings that must precede the first ``import jax``.

XLA's CPU backend spends most of a small test's time in LLVM optimisation of kernels that then
run for microseconds; level 0 keeps IEEE semantics (results are the same to the last bit in the
parity tests) and cuts compile time about 3x. Benchmarks (tools/bench.py) never set it.
"""

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
).strip()
