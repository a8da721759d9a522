"""zhlm's command-line programs, one module each (console scripts in setup.py).

Every program settles its process in :func:`settle_process` before it parses its flags
(``zhlm.cli.usage.run``, every program's entry), never when it is imported: tests and tools
import these modules without becoming a program.

- The platform: the CPU where libtpu is installed but no TPU or GPU is here
  (:mod:`zhlm.jax_platform`); a ``JAX_PLATFORMS`` the user set is kept.
- Host memory: a program that runs JAX on the CPU reuses the memory each step frees instead of
  mapping it afresh (:mod:`zhlm.host_memory`); on a TPU or GPU host malloc is left as it is.
  That setting makes XLA's compilation slower, which a program pays once and a test process
  (mostly compilation) would pay in every test: hence at run time, not at import.
- Compiled programs: JAX's persistent compilation cache in a per-user folder, so that a second
  run on the same shapes reads its programs instead of compiling them
  (:mod:`zhlm.compilation_cache`; ``ZHLM_COMPILATION_CACHE=off`` turns it off, a
  ``JAX_COMPILATION_CACHE_DIR`` already set is kept).
"""

import os

from zhlm import compilation_cache, host_memory, jax_platform


def settle_process(environ=os.environ) -> None:
    """The platform, host memory, then the compilation cache, as the module docstring says.
    Runs before the program starts JAX's backends: ``M_ARENA_MAX`` binds only threads that
    have not allocated yet."""
    jax_platform.cpu_unless_an_accelerator_is_here(environ)
    if jax_platform.runs_on_cpu(environ):
        host_memory.reuse_freed_memory()
    compilation_cache.use_persistent_cache(environ)
