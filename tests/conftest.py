"""Test-session settings that must precede the first ``import jax``.

XLA's CPU backend spends most of a small test's time in LLVM optimisation of kernels that then
run for microseconds; level 0 keeps IEEE semantics (results are the same to the last bit in the
parity tests) and cuts compile time about 3x. Benchmarks (tools/bench.py) never set it.
"""

import os
import tempfile

import pytest

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


@pytest.fixture(scope="module")
def clue_sample(tmp_path_factory):
    """The first 60 documents of the shared CLUE sample corpus, as a file of their own."""
    path = tmp_path_factory.mktemp("corpus") / "clue.txt"
    corpus = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "corpus")
    with open(os.path.join(corpus, "clue_small_docs.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\n")[:60]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)
