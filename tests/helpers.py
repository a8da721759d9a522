"""Small things several test modules share: loading configs the way the CLI does."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")


def load_config(recipe, arg=None):
    """``configs/<recipe>.py:get_config(arg)`` (``arg=None``: the file's default variant)."""
    path = os.path.join(ROOT, "configs", f"{recipe}.py")
    spec = importlib.util.spec_from_file_location(f"configs_{recipe}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)
