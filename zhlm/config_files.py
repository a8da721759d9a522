"""Loads a ``configs/*.py`` file the way ``--config=FILE.py:ARG`` does, for code without flags.

Why it exists: tests and tools (benchmarks, the ablation tables) need a recipe's config exactly as
the command line builds it, and one loader keeps them from drifting apart. The semantics are
``ml_collections.config_flags``': everything after the first ``:`` is passed to ``get_config``
as a string, and without a ``:`` ``get_config()`` is called with no argument (the file's
default variant). Unlike the flag the config is not locked, so callers may change values.
"""

import importlib.util
import os

from zhlm.errors import NotFound, UserError

# The pretraining recipes, one configs/<name>.py each: the list tests, tools and the bench read.
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")


def _configs_folder() -> str:
    """The recipes' folder: installed as the package ``zhlm.configs`` (setup.py maps the
    checkout's ``configs/`` there, so a non-editable install has them too), else the checkout's
    ``configs/`` beside the package."""
    spec = importlib.util.find_spec("zhlm.configs")
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


CONFIGS = _configs_folder()


def path(recipe: str) -> str:
    """The file of a recipe: a name (``bert``, ``finetune/ocnli``) is looked up in the recipes'
    folder from any directory (``NotFound`` listing them when it is not there); a path
    to a ``.py`` file is returned as it is, unless it is missing here and ``configs/<name>.py``
    names a recipe (the checkout's paths, given from another directory)."""
    if recipe.endswith(".py") and os.path.isfile(recipe):
        return recipe
    name = recipe.removesuffix(".py")
    name = name[len("configs/") :] if name.startswith("configs/") else name
    found = os.path.join(CONFIGS, f"{name}.py")
    if not os.path.isfile(found) and recipe.endswith(".py"):
        return recipe  # a path: loading it says that it is missing
    if not os.path.isfile(found):
        known = sorted(
            os.path.relpath(os.path.join(d, f), CONFIGS)[:-3]
            for d, _, files in os.walk(CONFIGS)
            for f in files
            if f.endswith(".py") and f != "__init__.py"
        )
        raise NotFound(
            f"no recipe {recipe!r}: pass the path of a .py file or one of {', '.join(known)}"
        )
    return found


def load(spec: str, arg: str | None = None):
    """``get_config(arg)`` of the file ``spec`` names: ``"bert"``, ``"finetune/ocnli"``,
    ``"configs/bert.py"``, or any of them with ``":ARG"`` as on the command line (then ``arg``
    must be None). ``arg=None`` and no ``:`` call ``get_config()``."""
    name, colon, flag_arg = spec.partition(":")
    if colon:
        if arg is not None:
            raise UserError(f"{spec!r} already names the argument; got arg={arg!r} as well")
        arg = flag_arg
    file = path(name)
    module_name = "zhlm_config_" + os.path.splitext(os.path.basename(file))[0]
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config() if arg is None else module.get_config(arg)
