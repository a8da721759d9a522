"""The prepared dataset a pretraining run reads: found, or prepared once and cached.

Why a cache keyed by content: ``zhlm-pretrain`` with no data options must train at once on the
corpus bundled in zhlm, and a second run (or a resumed one) must read the very same records, so
the dataset is prepared on the first run and found afterwards. The key is the recipe, every
data option, each input file's path, size and modification time, and the builder's VERSION
(what the pipeline makes of them): changing any of them prepares a new dataset instead of
silently training on a stale one.

``config.data.data_dir`` set: the dataset is read there (``zhlm-prepare --data_dir``); if it is
missing and ``config.data.input`` names inputs, it is prepared there first. Multi-host: process
0 prepares, the others wait at a barrier and then need to see the same directory.
"""

import hashlib
import json
import os

from etils import epath

from zhlm import paths
from zhlm.data import annotate, builder
from zhlm.data.loader import dataset_dir
from zhlm.errors import NotFound

BUNDLED_CORPUS = "peoples_daily_199801_sample.txt"


def cache_root() -> str:
    return os.environ.get("ZHLM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "zhlm")


def inputs_of(config) -> tuple:
    """``config.data.input``, or the bundled People's Daily sample as the ``train`` source."""
    return tuple(config.data.input) or (
        f"train={os.path.abspath(annotate.resource(BUNDLED_CORPUS))}",
    )


def _digest(config, inputs) -> str:
    data = {k: v for k, v in config.data.to_dict().items() if k not in ("data_dir", "input")}
    files = []
    for pattern in inputs:
        for path in paths.glob_files(pattern.rpartition("=")[2]):  # local or gs://
            files.append((pattern, os.fspath(paths.resolve(path)), *paths.fingerprint(path)))
    version = str(builder.ZhlmPretrain.VERSION)  # what the pipeline makes of the same files
    blob = json.dumps([config.recipe, data, files, version], sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _complete(path: str) -> bool:
    # TFDS writes into a temporary folder and renames it when done.
    return (epath.Path(path) / "dataset_info.json").exists()


def ensure_dataset(config, progress: bool = True) -> str:
    """Path of the prepared dataset for ``config`` (preparing it if needed, see above)."""
    import jax
    from jax.experimental import multihost_utils

    inputs = inputs_of(config)
    data_dir = config.data.data_dir or os.path.join(
        cache_root(), "datasets", _digest(config, inputs)
    )
    path = dataset_dir(data_dir, config)
    if _complete(path):
        return path
    if config.data.data_dir and not config.data.input:
        raise NotFound(
            f"no prepared dataset at {path}: run zhlm-prepare with --data_dir={data_dir} and "
            "this config, or set config.data.input to prepare it on the fly"
        )
    if jax.process_index() == 0:
        builder.prepare(
            config.data, config.recipe, inputs, data_dir, num_processes=1, progress=progress
        )
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("zhlm dataset prepared")
    if not _complete(path):
        raise NotFound(
            f"process {jax.process_index()} does not see the dataset process 0 prepared at "
            f"{path}: put config.data.data_dir on storage every host reads (e.g. gs://)"
        )
    return path
