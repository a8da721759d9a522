"""Test-session settings that must precede the first ``import jax``, and the fixtures tests in
several folders share.

XLA's CPU backend spends most of a small test's time in LLVM optimisation of kernels that then
run for microseconds; level 0 keeps IEEE semantics (results are the same to the last bit in the
parity tests) and cuts compile time about 3x. Benchmarks (tools/bench.py) never set it.

Most of the suite's time is compilation, and many tests compile the same tiny programs (each
builds its own trainer or model, so JAX's in-memory cache does not see the repeat), in this
process, in its child processes and, under pytest-xdist, in the other worker. One JAX
persistent compilation cache in a temporary folder serves them all: the environment variables
that JAX reads when it is imported, which the children and the workers inherit.
"""

import os
import shutil
import sys
import tempfile

import pytest

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
).strip()

# libtpu (the test extra brings it for tests/train/test_plan.py) makes every process try a TPU
# first: log errors, take /tmp/libtpu_lockfile. The tests' devices are CPUs (compile-only TPU
# topologies do not need the TPU backend); child processes inherit this.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# Datasets prepared on the fly by the loop and the tables are cached for the whole session (and
# its child processes), never in the user's ~/.cache. One folder a process: two xdist workers
# preparing the same dataset at once would race for its final name.
_MADE = [tempfile.mkdtemp(prefix="zhlm-test-cache-")]
os.environ["ZHLM_CACHE"] = _MADE[0]

# The compilation cache: made by the first process (pytest alone, or xdist's controller before it
# starts its workers), inherited by the rest. Every program is cached, however fast it compiled
# (JAX's default keeps only those over a second: few here).
if "PYTEST_XDIST_WORKER" not in os.environ:
    _MADE.append(tempfile.mkdtemp(prefix="zhlm-test-jax-cache-"))
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _MADE[-1]
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))  # tools/ is a script folder: bench_predict


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the tests marked slow (the longest, some of them minutes) go first,
    so that no worker starts one while the other is left with nothing to do. One process
    keeps the files' order, in which module fixtures are set up once."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_unconfigure(config):
    """This process's temporary folders go when it ends (a worker's only its own)."""
    for path in _MADE:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def clue_sample(tmp_path_factory):
    """The first 60 documents of the shared CLUE sample corpus, as a file of their own."""
    from helpers import DATA

    path = tmp_path_factory.mktemp("corpus") / "clue.txt"
    with open(os.path.join(DATA, "corpus", "clue_small_docs.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\n")[:60]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return str(path)


# kind -> (task config, task overrides) of the models ``workdirs`` makes.
MODELS = {
    "classification": ("chnsenticorp", dict(max_seq_length=32)),
    "pair": ("lcqmc", dict(max_seq_length=32)),
    "ner": ("msra_ner", dict(max_seq_length=24, doc_stride=8)),
    "mrc": ("cmrc2018", dict(max_seq_length=64, doc_stride=32, max_query_length=16)),
}


@pytest.fixture(scope="session")
def workdirs(tmp_path_factory):
    """``workdirs[kind]``: a zhlm-finetune workdir with a random tiny model of that kind saved
    as ``best/`` (what prediction loads), made when first asked for, once per test session."""
    from bench_predict import tiny_workdir
    from helpers import load_task

    root = tmp_path_factory.mktemp("models")

    class Made(dict):
        def __missing__(self, kind):
            name, task = MODELS[kind]
            config = load_task(name)
            config.task.update(**task)
            self[kind] = tiny_workdir(str(root / name), config)
            return self[kind]

    return Made()


@pytest.fixture
def gcs(monkeypatch):
    """``gs://`` paths in memory (``helpers.fake_gcs_class``: no append, as GCS) and
    tensorboardX's writer replaced by ``helpers.FakeEvents``; yields the stored objects."""
    import fsspec
    from etils.epath import backend
    from helpers import FakeEvents, fake_gcs_class

    fake = fake_gcs_class()
    for name in ("gs", "gcs"):
        fsspec.register_implementation(name, fake, clobber=True)
    backend.fsspec_backend._get_filesystem.cache_clear()
    monkeypatch.setattr("tensorboardX.SummaryWriter", FakeEvents)
    yield fake.store
    fake.store.clear()
    backend.fsspec_backend._get_filesystem.cache_clear()
