"""Names several test modules share: the repo root, the recipes, and the library's config loader
and synthetic batch under the names the tests import."""

import os

from zhlm.config_files import load as load_config  # noqa: F401 (re-exported for the tests)
from zhlm.data.synthetic import synthetic_batch  # noqa: F401 (re-exported for the tests)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")
