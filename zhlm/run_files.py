"""The files zhlm writes in a folder, named once: pretraining workdirs, parameter checkpoints,
fine-tuning workdirs.

Every reader and writer takes its paths from here (through ``zhlm.paths``, so a ``gs://``
folder works wherever a local one does): a renamed file cannot leave a reader behind.

* pretraining workdir (``zhlm-pretrain``): ``config.json``, ``checkpoints/<step>/`` (orbax: train
  state and data position), ``metrics.jsonl``, ``tensorboard/``;
* parameter checkpoint (``zhlm-convert``, a fine-tuning run's ``best/``): ``config.json`` and
  ``params/`` (orbax: the parameter tree);
* fine-tuning workdir (``zhlm-finetune``): ``config.json``, ``results.json``, ``best/`` and, for
  MRC, ``predictions_dev.json`` with ``eval_set.json``, for NER ``predictions_dev.jsonl``; while
  the run is unfinished, ``progress/`` (``zhlm.finetune.progress``);
* both workdirs, while a run uses them: ``lock.json`` (``zhlm.workdir_lock``).
"""

from etils import epath

from zhlm import paths

CONFIG = "config.json"
CHECKPOINTS = "checkpoints"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
PARAMS = "params"
RESULTS = "results.json"
BEST = "best"
PREDICTIONS = "predictions_dev.json"
NER_PREDICTIONS = "predictions_dev.jsonl"  # one line of entity spans per sentence
EVAL_SET = "eval_set.json"
LOCK = "lock.json"  # the run that holds the workdir
PROGRESS = "progress"  # an unfinished fine-tuning run's epochs (zhlm.finetune.progress)


def path(folder, *names: str) -> epath.Path:
    """``folder/names...``, local (absolute) or remote."""
    return paths.resolve(folder).joinpath(*names)


def is_params_checkpoint(folder) -> bool:
    return path(folder, CONFIG).is_file() and path(folder, PARAMS).is_dir()


def finetuned_params(folder) -> str:
    """``folder`` when it is a parameter checkpoint, its ``best/`` when that is one (a finished
    fine-tuning workdir), else ""."""
    if is_params_checkpoint(folder):
        return str(folder)
    best = path(folder, BEST)
    return str(best) if is_params_checkpoint(best) else ""


def is_pretraining(folder) -> bool:
    return path(folder, CHECKPOINTS).is_dir()


def checkpoint_steps(folder) -> list[int]:
    """The steps saved under a pretraining workdir's ``checkpoints/``, ascending."""
    root = path(folder, CHECKPOINTS)
    if not root.is_dir():
        return []
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
