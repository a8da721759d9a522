"""glibc malloc set up for a process that runs JAX on the CPU: freed memory is reused, never
handed back to the kernel and mapped afresh.

Why: XLA:CPU allocates a step's temporaries (activations, gradients, the optimizer's update)
when the step starts and frees them when it ends, hundreds of MiB each step even for a tiny
model. glibc serves every block above its mmap threshold, and every block a worker thread
needs beyond its arena's 64 MiB heap, with a fresh ``mmap`` and unmaps it on ``free``; the next
step's blocks are fresh pages again, each 4 KiB page a fault that the kernel zero-fills. On a
tiny train step that was a quarter of the step's CPU time spent in the kernel. With one arena
(the main heap, which grows without that limit), no mmap and no trimming, the next step's
blocks are the last step's, already mapped.

Cost: the process keeps its peak heap (memory freed is reused by the process, not returned),
and its threads share one arena's lock, which makes XLA's compilation (many threads, many
small blocks) slower by a fifth or more. A training or prediction run on the CPU compiles a few
programs and then runs them for thousands of steps, so it gains; a run of a few steps, such as
most tests, loses, which is why the tests' own process is left alone. On a TPU or GPU host the
device holds the tensors and the host runs input pipelines with many threads that allocate
small blocks often, so there it is left alone too (``zhlm.cli.settle_process`` decides when a
program starts; importing changes nothing). ``M_ARENA_MAX`` binds only threads that have not
allocated yet, so this must run before JAX starts its backend.
"""

import ctypes
import ctypes.util
import platform

# mallopt(3) parameters, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8
_NEVER = 2**31 - 1  # the largest value mallopt takes: trim nothing


def reuse_freed_memory() -> bool:
    """Sets glibc malloc as the module docstring says; False where the C library is not glibc
    (macOS, musl: nothing to set) or refuses a setting."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    settings = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, _NEVER))
    return all(libc.mallopt(param, value) == 1 for param, value in settings)
