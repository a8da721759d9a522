"""zhlm's command-line programs, one module each (console scripts in setup.py).

Importing this package settles the JAX platform before any program imports JAX: with libtpu
installed (the ``tpu`` and ``test`` extras bring it) on a machine without a TPU, JAX would
first try the TPU backend in every process, print libtpu's initialisation errors and take
``/tmp/libtpu_lockfile``. There, and where no GPU plugin is installed either, the programs run
on the CPU (``JAX_PLATFORMS=cpu``, JAX's documented switch). A ``JAX_PLATFORMS`` the user set
is kept, and so is the default on a TPU VM or with a GPU plugin.
"""

import glob
import importlib.util
import os

TPU_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/*")  # TPU v2-v5e / v5p and v6e VMs
GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def cpu_unless_an_accelerator_is_here(environ=os.environ) -> None:
    if environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
        return
    if any(glob.glob(pattern) for pattern in TPU_DEVICE_FILES):
        return
    if any(importlib.util.find_spec(name) for name in GPU_PLUGINS):
        return
    environ["JAX_PLATFORMS"] = "cpu"


cpu_unless_an_accelerator_is_here()
