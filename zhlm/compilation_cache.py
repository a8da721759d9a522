"""JAX's persistent compilation cache for zhlm's programs, and a count of what a process
compiled.

Why: a program compiles its jitted functions afresh in every process, seconds each on a CPU
(a tiny classifier's three length buckets took about 3 s, more than predicting 1,024 inputs),
though a second ``zhlm-predict`` or a resumed ``zhlm-finetune`` asks for the very same
programs. With JAX's persistent cache (its own documented settings:
``jax_compilation_cache_dir``, ``jax_persistent_cache_min_compile_time_secs``,
``jax_persistent_cache_min_entry_size_bytes``) the second process reads them from disk.

**Where**: ``ZHLM_CACHE/jax`` (``ZHLM_CACHE`` is the root of zhlm's caches, default
``~/.cache/zhlm``, a per-user folder; prepared datasets lie beside). Every program is kept,
however fast it compiled (JAX's default keeps only those over a second: none of a tiny
model's). ``ZHLM_COMPILATION_CACHE=off`` turns it off; a cache the user or a test session
set up through JAX's own variables (``JAX_COMPILATION_CACHE_DIR`` and the two thresholds) is
kept as it is. Set in the environment before JAX is imported (``zhlm.cli.settle_process``,
every program's start), so that the program's child processes share it; importing this module
changes nothing. The cache is trusted code: JAX's documentation warns against a folder others
may write to, hence per user.

**What was compiled** (:class:`CompileCount`): JAX reports each backend compilation
(``/jax/core/compile/backend_compile_duration``, which includes reading a program from the
persistent cache) and each program the cache served (``/jax/compilation_cache/cache_hits``)
through ``jax.monitoring``; the compilations the cache did not serve were compiled here.
"""

from __future__ import annotations

import os
import sys

OFF = ("off", "0", "false", "no")  # values of ZHLM_COMPILATION_CACHE that turn the cache off
SWITCH = "ZHLM_COMPILATION_CACHE"
# JAX's environment variables (its config names upper-cased), with zhlm's values.
SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}
DIR = "JAX_COMPILATION_CACHE_DIR"

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"


def folder(environ=os.environ) -> str:
    """The per-user folder of compiled programs: ``ZHLM_CACHE`` (else ``~/.cache/zhlm``)/jax."""
    root = environ.get("ZHLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "zhlm")
    return os.path.join(root, "jax")


def use_persistent_cache(environ=os.environ) -> str:
    """Turns JAX's persistent cache on for this process and its children, in :func:`folder`;
    returns the folder in use, or "" when ``ZHLM_COMPILATION_CACHE=off``. A cache folder
    already set (``JAX_COMPILATION_CACHE_DIR``, by the user or a test session) is kept with
    its thresholds. JAX reads these variables when imported: after that, its config is set too."""
    if environ.get(SWITCH, "").strip().lower() in OFF:
        return ""
    if environ.get(DIR):
        return environ[DIR]
    environ[DIR] = folder(environ)
    for name, value in SETTINGS.items():
        environ.setdefault(name, value)
    jax = sys.modules.get("jax")
    if jax is not None and environ is os.environ:  # this process's JAX read it already
        jax.config.update("jax_compilation_cache_dir", environ[DIR])
        for name in SETTINGS:
            kind = float if name.endswith("SECS") else int
            jax.config.update(name.lower(), kind(environ[name]))
    return environ[DIR]


class CompileCount:
    """Programs compiled and read from the persistent cache while it is open (a ``with``
    block), from ``jax.monitoring``'s events: ``compiled`` and ``compile_seconds`` (built here),
    ``cached`` and ``cache_seconds`` (read from the cache). JAX reports a cache hit before the
    backend compilation event that wraps it ends, so a hit claims the next such event."""

    def __init__(self):
        self.compiled = self.cached = self._hits_pending = 0
        self.compile_seconds = self.cache_seconds = 0.0

    def _event(self, event: str, **_) -> None:
        if event == CACHE_HIT:
            self.cached += 1
            self._hits_pending += 1

    def _duration(self, event: str, seconds: float, **_) -> None:
        if event != BACKEND_COMPILE:
            return
        if self._hits_pending:
            self._hits_pending -= 1
            self.cache_seconds += seconds
        else:
            self.compiled += 1
            self.compile_seconds += seconds

    def __enter__(self) -> CompileCount:
        from jax import monitoring

        monitoring.register_event_listener(self._event)
        monitoring.register_event_duration_secs_listener(self._duration)
        return self

    def __exit__(self, *error) -> None:
        from jax import monitoring

        monitoring.unregister_event_listener(self._event)
        monitoring.unregister_event_duration_listener(self._duration)

    def describe(self) -> str:
        """``2 programs compiled in 3.1 s, 1 read from the compilation cache``."""
        programs = "program" if self.compiled == 1 else "programs"
        text = f"{self.compiled} {programs} compiled in {self.compile_seconds:.1f} s"
        return text + (f", {self.cached} read from the compilation cache" if self.cached else "")
