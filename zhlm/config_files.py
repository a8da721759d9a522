"""Loads a ``configs/*.py`` file the way ``--config=FILE.py:ARG`` does, for code without flags.

Why it exists: tests and tools (benchmarks, the ablation tables) need a recipe's config exactly as
the command line builds it, and one loader keeps them from drifting apart. The semantics are
``ml_collections.config_flags``': everything after the first ``:`` is passed to ``get_config``
as a string, and without a ``:`` ``get_config()`` is called with no argument (the file's
default variant). Unlike the flag the config is not locked, so callers may change values.
"""

import importlib.util
import os

# The pretraining recipes, one configs/<name>.py each: the list tests, tools and the bench read.
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")
# A source checkout (or an editable install) has the recipes beside the package.
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def path(recipe: str) -> str:
    """``configs/<recipe>.py`` of this checkout (``recipe`` may be ``finetune/ocnli``); a path
    to a ``.py`` file is returned as it is."""
    if recipe.endswith(".py"):
        return recipe
    if not os.path.isdir(CONFIGS):
        raise FileNotFoundError(f"no configs/ folder at {CONFIGS}: pass the path of a .py file")
    return os.path.join(CONFIGS, f"{recipe}.py")


def load(spec: str, arg: str | None = None):
    """``get_config(arg)`` of the file ``spec`` names: ``"bert"``, ``"finetune/ocnli"``,
    ``"configs/bert.py"``, or any of them with ``":ARG"`` as on the command line (then ``arg``
    must be None). ``arg=None`` and no ``:`` call ``get_config()``."""
    name, colon, flag_arg = spec.partition(":")
    if colon:
        if arg is not None:
            raise ValueError(f"{spec!r} already names the argument; got arg={arg!r} as well")
        arg = flag_arg
    file = path(name)
    module_name = "zhlm_config_" + os.path.splitext(os.path.basename(file))[0]
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)
