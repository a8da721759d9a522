"""Names several test modules share: the repo root, the recipes, the library's config loader
and synthetic batch under the names the tests import, the environment of a training child, and
the fine-tuning task configs on the shared data."""

import os

from zhlm.config_files import load as load_config  # noqa: F401 (re-exported for the tests)
from zhlm.data.synthetic import synthetic_batch  # noqa: F401 (re-exported for the tests)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECIPES = ("bert", "roberta_wwm", "ernie", "spanbert", "albert", "macbert")


def without_opt_level_zero() -> dict:
    """The environment minus conftest's XLA opt-level-0 flag, for a child process that trains:
    a few hundred steps are bound by execution, which that flag makes 2-3x slower, not by
    compilation."""
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    return dict(os.environ, XLA_FLAGS=flags.strip(), PYTHONPATH=ROOT)


DATA = os.path.join(ROOT, "..", "shared", "data")

# The task configs name no data path (users pass theirs); these are the files in ../shared/data.
SHARED_FILES = {
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "lcqmc": ("lcqmc/dev.txt", ""),  # split by the config's holdout
    "ocnli": ("ocnli/train.10k.json", "ocnli/dev.json"),
    "cmrc2018": ("cmrc2018/cmrc2018_dev.json", ""),  # split by the config's holdout
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),
}


def load_task(name, arg="tiny", shared=True):
    """``configs/finetune/<name>.py:get_config(arg)``, locked as the command line locks it,
    with ``task.train_file``/``dev_file`` set to the shared data (``shared=False``: as the
    file leaves them, empty)."""
    config = load_config(f"finetune/{name}", arg)
    if shared:
        train, dev = (os.path.join(DATA, f) if f else "" for f in SHARED_FILES[name])
        config.task.update(train_file=train, dev_file=dev)
    config.lock()
    return config
