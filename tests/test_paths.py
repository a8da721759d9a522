"""Workdirs on cloud storage: ``gs://`` paths stay URLs, and what the loop writes itself
(``config.json``, ``metrics.jsonl``, parameter checkpoints' config) goes through epath.

Why: ``launch_tpu.sh`` trains into ``gs://BUCKET/RUN``; ``os.path.abspath`` used to turn that into
``./gs:/BUCKET/RUN`` on the VM's disk, lost with a preempted VM. An in-memory filesystem registered
as fsspec's ``gs`` stands in for GCS, with GCS's one trait that matters here: no append.
"""

import json
import os

from etils import epath
from helpers import FakeEvents

from zhlm import paths
from zhlm.train import metrics


def test_resolve_keeps_urls_and_makes_local_paths_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert os.fspath(paths.resolve("gs://bucket/run")) == "gs://bucket/run"
    assert os.fspath(paths.resolve("run")) == str(tmp_path / "run")
    assert paths.is_remote("gs://b/x") and not paths.is_remote(str(tmp_path))


def test_metrics_on_storage_without_append_survive_a_resume(gcs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = metrics.Writer("gs://bucket/run", remote_flush_seconds=0)
    writer.write(10, "train", {"loss": 2.5})
    writer.write(10, "eval", {"loss": 2.7})
    writer.close()
    assert FakeEvents.logdirs[-1] == "gs://bucket/run/tensorboard"
    resumed = metrics.Writer("gs://bucket/run", remote_flush_seconds=3600)
    resumed.write(20, "train", {"loss": 2.0})  # buffered: flushed on close
    assert [m["step"] for m in metrics.read("gs://bucket/run")] == [10]
    resumed.close()
    lines = metrics.read("gs://bucket/run")
    assert [(m["step"], m["loss"]) for m in lines] == [(10, 2.5), (20, 2.0)]
    assert [m["step"] for m in metrics.read("gs://bucket/run", "eval")] == [10]
    assert "bucket/run/metrics.jsonl" in gcs
    assert not (tmp_path / "gs:").exists()  # what os.path.abspath made of the URL before


def test_params_checkpoint_config_is_read_through_epath(gcs):
    from zhlm import run_files

    root = epath.Path("gs://bucket/ckpt")
    (root / run_files.PARAMS).mkdir(parents=True, exist_ok=True)
    (root / run_files.PARAMS / "_METADATA").write_text("{}")
    assert not run_files.is_params_checkpoint("gs://bucket/ckpt")  # no config.json yet
    (root / run_files.CONFIG).write_text(json.dumps({}))
    assert run_files.is_params_checkpoint("gs://bucket/ckpt")


def test_corpus_inputs_on_storage_read_like_local_files(gcs, tmp_path):
    """A Beam pipeline on Dataflow reads its corpus from a bucket: globs, byte-range shards
    (seeks) and gzip read the same documents as from the local disk."""
    import gzip

    from zhlm.data import text

    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
    with open(os.path.join(data, "corpus", "clue_small_docs.txt"), "rb") as f:
        raw = f.read(300_000)
    raw = raw[: raw.rfind(b"\n\n") + 2]
    for root in (epath.Path("gs://bucket/corpus"), epath.Path(tmp_path)):
        root.mkdir(parents=True, exist_ok=True)
        (root / "a.txt").write_bytes(raw)
        (root / "b.txt.gz").write_bytes(gzip.compress(raw[:50_000]))
        (root / "skip.md").write_bytes(b"not matched")

    def documents(pattern):
        report = text.Report()
        shards = text.expand_inputs([pattern], report, shard_bytes=40_000)
        docs = [d for s in shards for d in text.read_documents(s, "sentences", "text", report)]
        return len(shards), docs, report.to_dict()

    n_local, local, local_report = documents(str(tmp_path / "*.txt*"))
    n_remote, remote, remote_report = documents("gs://bucket/corpus/*.txt*")
    assert n_remote == n_local > 5 and len(remote) == len(local) > 100
    assert remote == local and remote_report == local_report
    assert (
        text.expand_inputs(
            ["gs://bucket/nothing/*.txt", "gs://bucket/corpus/a.txt"], text.Report(), 10**9
        )[0].path
        == "gs://bucket/corpus/a.txt"
    )


def test_dataset_cache_key_sees_a_changed_input_in_a_bucket(gcs):
    """Inputs in a bucket are part of the cache key, as local ones are: a changed file must
    prepare a new dataset, not reuse the stale one."""
    from helpers import load_config

    from zhlm.data import cache

    corpus = epath.Path("gs://bucket/corpus/a.txt")
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text("第一句。\n\n第二句。\n")
    config = load_config("bert", "tiny")
    inputs = ("train=gs://bucket/corpus/*.txt",)
    before = cache._digest(config, inputs)
    assert cache._digest(config, inputs) == before
    corpus.write_text("第一句。\n\n第二句，改了。\n")
    assert cache._digest(config, inputs) != before
