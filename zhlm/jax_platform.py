"""Which platform JAX runs a zhlm process on, settled before JAX starts its backends.

With libtpu installed (the ``tpu`` and ``test`` extras bring it) on a machine without a TPU,
JAX's default would first try the TPU backend in every process: print libtpu's initialisation
errors and take ``/tmp/libtpu_lockfile``. There, and where no GPU plugin is installed either,
zhlm runs JAX on the CPU (``JAX_PLATFORMS=cpu``, JAX's documented switch). A platform the user
chose (``JAX_PLATFORMS``, or ``jax.config.update("jax_platforms", ...)``) is kept, and so is
JAX's default on a TPU VM or with a GPU plugin, or once JAX has started its backends (a
process's platform cannot change then).

The programs settle this in their ``run()`` (``zhlm.cli.settle_process``); the library's entry
points (``zhlm.pipeline``, ``zhlm.Predictor``, ``zhlm.from_hf``) when first used. Importing
this module changes nothing.
"""

import glob
import importlib.util
import os
import sys

TPU_DEVICE_FILES = ("/dev/accel*", "/dev/vfio/*")  # TPU v2-v5e / v5p and v6e VMs
GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")


def accelerator_here() -> bool:
    """Whether JAX's default platform here would be a TPU or a GPU."""
    if any(glob.glob(pattern) for pattern in TPU_DEVICE_FILES):
        return True
    return any(importlib.util.find_spec(name) for name in GPU_PLUGINS)


def cpu_wanted(environ=os.environ) -> bool:
    """Whether JAX left to its default would look for a TPU that is not here: libtpu is
    installed, ``JAX_PLATFORMS`` is unset and no TPU or GPU is here."""
    if environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
        return False
    return not accelerator_here()


def jax_platform_chosen() -> bool:
    """Whether this process's JAX has its platform already: set through ``jax.config``, or its
    backends started. False when JAX is not imported yet."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    if jax.config.jax_platforms:
        return True
    try:
        from jax._src import xla_bridge
    except ImportError:  # a JAX that moved it: assume started, change nothing
        return True
    return getattr(xla_bridge, "backends_are_initialized", lambda: True)()


def cpu_unless_an_accelerator_is_here(environ=os.environ) -> bool:
    """Sets the CPU platform where :func:`cpu_wanted` and JAX has not chosen yet (the
    environment, which child processes inherit, and an imported JAX's config); True when it
    did."""
    if not cpu_wanted(environ) or jax_platform_chosen():
        return False
    environ["JAX_PLATFORMS"] = "cpu"
    if "jax" in sys.modules:  # JAX read the environment when it was imported
        sys.modules["jax"].config.update("jax_platforms", "cpu")
    return True


def runs_on_cpu(environ=os.environ) -> bool:
    """Whether JAX will run this process on the CPU: the first of ``JAX_PLATFORMS`` is ``cpu``,
    or, unset, no accelerator is here."""
    platforms = environ.get("JAX_PLATFORMS", "")
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    return not accelerator_here()
