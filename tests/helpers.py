"""Names several test modules share: the repo root and shared data, the recipes, the library's
config loader and synthetic batch under the names the tests import, the environment of a
training child, the fine-tuning task configs on the shared data and random HF folders."""

import importlib.util
import os

from zhlm.config_files import RECIPES  # noqa: F401 (re-exported for the tests)
from zhlm.config_files import load as load_config  # noqa: F401 (re-exported for the tests)
from zhlm.data.synthetic import synthetic_batch  # noqa: F401 (re-exported for the tests)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data")  # the shared corpora and task files


def without_opt_level_zero() -> dict:
    """The environment minus conftest's XLA opt-level-0 flag, for a child process that trains:
    a few hundred steps are bound by execution, which that flag makes 2-3x slower, not by
    compilation."""
    flags = os.environ.get("XLA_FLAGS", "").replace("--xla_backend_optimization_level=0", "")
    return dict(os.environ, XLA_FLAGS=flags.strip(), PYTHONPATH=ROOT)


# The task configs name no data path (users pass theirs); these are the files in ../shared/data.
SHARED_FILES = {
    "chnsenticorp": ("chnsenticorp/train.tsv", "chnsenticorp/dev.tsv"),
    "lcqmc": ("lcqmc/dev.txt", ""),  # split by the config's holdout
    "ocnli": ("ocnli/train.10k.json", "ocnli/dev.json"),
    "cmrc2018": ("cmrc2018/cmrc2018_dev.json", ""),  # split by the config's holdout
    "msra_ner": ("msra_ner/train.txt", "msra_ner/dev.txt"),
    "c3": ("c3/c3-d-train.json,c3/c3-m-train.json", "c3/c3-d-dev.json,c3/c3-m-dev.json"),
}


def load_task(name, arg="tiny", shared=True):
    """``configs/finetune/<name>.py:get_config(arg)``, locked as the command line locks it,
    with ``task.train_file``/``dev_file`` set to the shared data (``shared=False``: as the
    file leaves them, empty)."""
    path = os.path.join(ROOT, "configs", "finetune", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"finetune_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config(arg)
    if shared:
        train, dev = (
            ",".join(os.path.join(DATA, part) for part in f.split(",")) if f else ""
            for f in SHARED_FILES[name]
        )
        config.task.update(train_file=train, dev_file=dev)
    config.lock()
    return config


def hf_folder(tmp_path, architecture, family="Bert", **kwargs):
    """A random HF ``architecture`` (of ``family``: Bert, Albert or Ernie) saved to a folder."""
    import torch
    import transformers

    torch.manual_seed(0)
    if family == "Albert":
        kwargs.setdefault("embedding_size", 32)
    hf_config = getattr(transformers, f"{family}Config")(
        vocab_size=21128,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=128,
        **kwargs,
    )
    model = getattr(transformers, architecture)(hf_config).eval()
    with torch.no_grad():  # random heads with visible biases, not the zero init
        for name, p in model.named_parameters():
            if name.startswith(("classifier", "qa_outputs")):
                p.normal_(0, 0.5)
    path = str(tmp_path / architecture)
    model.save_pretrained(path)
    return model, path


def read_task(task):
    """``(train, evaluation, reports)`` as zhlm-finetune reads them: the task's kind resolved,
    its files read and the training examples those the kind learns from."""
    from zhlm.finetune import kinds, task_files

    kind = kinds.get(task.kind)
    train, evaluation, reports = task_files.read_task(kind, task)
    return kind.training_examples(task, train), evaluation, reports
