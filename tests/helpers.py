"""Names several test modules share: the repo root, the recipes, the library's config loader
and synthetic batch under the names the tests import, and the environment of a training child."""

import os

from zhlm.config_files import RECIPES  # noqa: F401 (re-exported for the tests)
from zhlm.config_files import load as load_config  # noqa: F401 (re-exported for the tests)
from zhlm.data.synthetic import synthetic_batch  # noqa: F401 (re-exported for the tests)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def without_opt_level_zero() -> dict:
    """The environment minus conftest's XLA opt-level-0 flag, for a child process that trains:
    a few hundred steps are bound by execution, which that flag makes 2-3x slower, not by
    compilation."""
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    return dict(os.environ, XLA_FLAGS=flags.strip(), PYTHONPATH=ROOT)
