"""zhlm's command-line programs, one module each (console scripts in setup.py).

Importing this package settles the process before any program starts JAX:

- The platform: with libtpu installed (the ``tpu`` and ``test`` extras bring it) on a machine
  without a TPU, JAX would first try the TPU backend in every process, print libtpu's
  initialisation errors and take ``/tmp/libtpu_lockfile``. There, and where no GPU plugin is
  installed either, the programs run on the CPU (``JAX_PLATFORMS=cpu``, JAX's documented
  switch). A ``JAX_PLATFORMS`` the user set is kept, and so is the default on a TPU VM or with
  a GPU plugin.
- Host memory: a program that runs JAX on the CPU reuses the memory each step frees instead of
  mapping it afresh (:mod:`zhlm.host_memory`); on a TPU or GPU host malloc is left as it is.
"""

import glob
import importlib.util
import os

from zhlm import host_memory

TPU_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/*")  # TPU v2-v5e / v5p and v6e VMs
GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def accelerator_here() -> bool:
    """Whether JAX's default platform here would be a TPU or a GPU."""
    if any(glob.glob(pattern) for pattern in TPU_DEVICE_FILES):
        return True
    return any(importlib.util.find_spec(name) for name in GPU_PLUGINS)


def cpu_unless_an_accelerator_is_here(environ=os.environ) -> None:
    if environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
        return
    if not accelerator_here():
        environ["JAX_PLATFORMS"] = "cpu"


def runs_on_cpu(environ=os.environ) -> bool:
    """Whether JAX will run this process on the CPU: the first of ``JAX_PLATFORMS`` is ``cpu``,
    or, unset, no accelerator is here."""
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not accelerator_here()


cpu_unless_an_accelerator_is_here()
if runs_on_cpu():
    host_memory.reuse_freed_memory()
