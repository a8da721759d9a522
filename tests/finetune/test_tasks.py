"""The task configs on the shared data, the holdout split and a missing file."""

import collections
import os

import pytest
from helpers import load_task, read_task

from zhlm.finetune import kinds, task_files
from zhlm.finetune.train import finetune


def check_task(task):
    task_files.check_task(kinds.get(task.kind), task)


TASKS = ("chnsenticorp", "lcqmc", "ocnli", "cmrc2018", "msra_ner", "c3")


# ------------------------------------------------------------------------------- configs


@pytest.mark.parametrize("name", TASKS)
def test_task_configs_load_and_point_at_the_shared_data(name):
    with pytest.raises(ValueError, match=r"^config.task.train_file is empty: pass --config"):
        check_task(load_task(name, shared=False).task)  # no path but the user's
    config = load_task(name)
    check_task(config.task)
    files = f"{config.task.train_file},{config.task.dev_file}".strip(",").split(",")
    assert all(os.path.isfile(f) for f in files)
    assert config.model.size == "tiny" and config.optim.schedule == "linear"
    with pytest.raises(AttributeError):
        config.task.max_seq_len = 64  # locked: a typo is an error, not a new key


def test_holdout_splits_are_seeded_stratified_draws_and_keep_passages_whole():
    lcqmc = load_task("lcqmc")
    train, held, _ = read_task(lcqmc.task)
    assert (len(train), len(held)) == (7042, 1760)
    assert collections.Counter(e.label for e in held) == {"0": 880, "1": 880}  # 4400 / 4402
    lines = [e.line for e in held]
    assert lines == sorted(lines) and lines[-1] - lines[0] > 8000  # drawn over the whole file
    again, _, _ = read_task(load_task("lcqmc").task)
    assert [e.line for e in again] == [e.line for e in train]
    train, held, _ = read_task(load_task("cmrc2018").task)
    passages = {e.context for e in train}, {e.context for e in held}
    assert (len(passages[0]), len(passages[1])) == (678, 170)
    assert not passages[0] & passages[1]
    assert len(train) + len(held) == 3219


def test_a_missing_file_is_one_clear_error(tmp_path):
    config = load_task("ocnli")
    config.task.train_file = str(tmp_path / "nowhere.json")
    with pytest.raises(FileNotFoundError, match="nowhere.json: no such file"):
        finetune(config, None, str(tmp_path / "w"))
