"""``zhlm.compilation_cache``: the programs' persistent cache lies in the user's zhlm cache
unless switched off, a cache folder already set (a user's, the test session's) is kept, and
the count of compiled programs tells a compile from a cache read."""

import os

import jax
import numpy as np

from zhlm import compilation_cache


def test_the_cache_folder_is_the_users_unless_one_is_set_or_it_is_off(tmp_path, monkeypatch):
    environ = {"ZHLM_CACHE": str(tmp_path)}
    assert compilation_cache.use_persistent_cache(environ) == str(tmp_path / "jax")
    assert environ == {
        "ZHLM_CACHE": str(tmp_path),
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    }
    monkeypatch.setenv("HOME", str(tmp_path))  # expanduser reads the process's HOME
    assert compilation_cache.folder({}) == str(tmp_path / ".cache" / "zhlm" / "jax")
    mine = {"JAX_COMPILATION_CACHE_DIR": "/my/cache", "ZHLM_CACHE": str(tmp_path)}
    assert compilation_cache.use_persistent_cache(mine) == "/my/cache"
    assert mine == {"JAX_COMPILATION_CACHE_DIR": "/my/cache", "ZHLM_CACHE": str(tmp_path)}
    for off in ("off", "OFF", "0"):
        environ = {"ZHLM_COMPILATION_CACHE": off}
        assert compilation_cache.use_persistent_cache(environ) == ""
        assert environ == {"ZHLM_COMPILATION_CACHE": off}


def test_the_test_session_keeps_its_own_cache():
    """tests/conftest.py set one up before JAX was imported: a program settling its process
    (``zhlm.cli.settle_process``) keeps it, never writing to the user's home."""
    session = os.environ["JAX_COMPILATION_CACHE_DIR"]
    assert compilation_cache.use_persistent_cache() == session
    assert jax.config.jax_compilation_cache_dir == session


def test_a_compile_is_counted_and_a_cache_read_is_not_a_compile():
    seed = int.from_bytes(os.urandom(3), "little")  # a program no earlier run compiled (int32)
    with compilation_cache.CompileCount() as count:
        jax.jit(lambda x: x * seed + 1)(np.arange(3.0)).block_until_ready()
    assert (count.compiled, count.cached) == (1, 0)
    assert count.compile_seconds > 0
    assert count.describe().startswith("1 program compiled in ")
    jax.clear_caches()  # the in-memory one: the next call asks the persistent cache
    with compilation_cache.CompileCount() as again:
        jax.jit(lambda x: x * seed + 1)(np.arange(3.0)).block_until_ready()
    assert (again.compiled, again.cached) == (0, 1)
    assert again.compile_seconds == 0 and again.cache_seconds > 0
    assert again.describe() == "0 programs compiled in 0.0 s, 1 read from the compilation cache"
