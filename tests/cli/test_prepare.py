"""``zhlm-prepare`` as a user runs it (the console script, in a child process) on a Beam runner:
README's multi-worker DirectRunner command writes what the local processes write, and a
runner that lacks something stops in one line before the corpus is read.

Why: the DirectRunner's ``multi_processing`` mode runs each worker in a process of its own that
receives the pipeline's pickled functions, as a cluster's workers do: the nearest this machine
gets to Dataflow, Flink or Spark. The README's command is the one tested, so it cannot drift.
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds
from helpers import DATA, ROOT, load_config

from zhlm.data import builder

pytest.importorskip("apache_beam")

# absl's log lines (the TFDS builder logs while zhlm-prepare starts): not the program's own.
LOG_LINE = re.compile(r"^[IWEF]\d{4} ")


def readme_command(marker: str) -> list[str]:
    """The README command (a ``zhlm-prepare`` line and its continuations) holding ``marker``."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for block in re.findall(r"```bash\n(.*?)```", readme, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.startswith("zhlm-prepare ") and marker in command:
                return shlex.split(command)
    raise AssertionError(f"README.md has no zhlm-prepare command with {marker}")


def _user_env(extra_path: str = "") -> dict:
    """The console scripts of this Python first on PATH, this checkout's zhlm imported."""
    scripts = os.path.dirname(sys.executable)
    assert os.path.exists(os.path.join(scripts, "zhlm-prepare")), "pip install -e . first"
    pythonpath = os.pathsep.join(p for p in (extra_path, ROOT) if p)
    return dict(os.environ, PATH=scripts + os.pathsep + os.environ["PATH"], PYTHONPATH=pythonpath)


def _corpus(folder):
    """Two files of the CLUE sample under ``folder/corpus``: two shards, one a worker."""
    with open(os.path.join(DATA, "corpus", "clue_small_docs.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\n")
    (folder / "corpus").mkdir()
    (folder / "corpus" / "a.txt").write_text("\n\n".join(docs[:60]) + "\n", encoding="utf-8")
    (folder / "corpus" / "b.txt").write_text("\n\n".join(docs[60:100]) + "\n", encoding="utf-8")


def _shards(root) -> list[str]:
    """The dataset's record files, by their paths under ``root``."""
    return sorted(os.path.relpath(path, root) for path in root.rglob("*.array_record-*"))


def _record_bytes(record: dict) -> dict:
    """Each field of a decoded record as ``(dtype, shape, bytes)``. The files themselves differ:
    TFDS serializes a record's fields as a protobuf map, whose order on the wire is not fixed
    from one process to another (a Beam worker's against the writer's)."""
    return {key: (value.dtype.str, value.shape, value.tobytes()) for key, value in record.items()}


@pytest.mark.slow
def test_readme_multi_worker_command_writes_what_the_local_processes_write(tmp_path, monkeypatch):
    command = readme_command("direct_running_mode=multi_processing")
    assert command[0] == "zhlm-prepare"
    options = [a for a in command if a.startswith("--beam_pipeline_options=")]
    assert options == [
        "--beam_pipeline_options="
        "runner=DirectRunner,direct_num_workers=2,direct_running_mode=multi_processing"
    ]
    _corpus(tmp_path)
    beam_dir = tmp_path / "beam"
    command = [a for a in command if not a.startswith("--data_dir=")] + [f"--data_dir={beam_dir}"]
    done = subprocess.run(
        command, cwd=tmp_path, env=_user_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Each Beam worker process logs the options it was started with: two, multi-processing.
    started = re.findall(
        r"Pipeline_options: \{[^\n]*'direct_running_mode': 'multi_processing'", done.stderr
    )
    assert len(started) >= 2, done.stderr[-3000:]

    # The local processes, on the same relative glob (the report names files as given).
    monkeypatch.chdir(tmp_path)
    config_arg = next(a for a in command if a.startswith("--config="))
    config = load_config(config_arg.split("=", 1)[1])
    glob_ = next(a for a in command if a.startswith("--input=")).split("=", 1)[1]
    local, report = builder.prepare(
        config.data, config.recipe, [glob_], str(tmp_path / "local"), 2, progress=False
    )
    assert _shards(beam_dir) == _shards(tmp_path / "local") != []
    dataset = beam_dir / os.path.relpath(local.data_dir, tmp_path / "local")
    want_records = local.as_data_source(split="train")
    got_records = tfds.builder_from_directory(dataset).as_data_source(split="train")
    assert len(got_records) == len(want_records) > 50
    for i in range(len(want_records)):  # in order, every field byte for byte
        assert _record_bytes(got_records[i]) == _record_bytes(want_records[i]), i

    metadata = json.loads((dataset / "metadata.json").read_text(encoding="utf-8"))
    want = report.to_dict()
    got = metadata["report"]
    for key in ("counts", "reasons", "per_source"):
        assert got[key] == want[key], key
    assert sorted(got["messages"]) == sorted(want["messages"])  # Beam merges in any order
    head = report.format().split("examples:")[0]
    assert (dataset / "report.txt").read_text(encoding="utf-8").startswith(head)
    assert head in done.stdout
    assert not list(beam_dir.rglob("beam-report-*"))


def _refused(tmp_path, options: str, extra_path: str = "", runner: str = ""):
    """``zhlm-prepare`` on an input no one can read without blocking (a named pipe with no
    writer: reading it would hang until the timeout), with ``options``: its exit status and
    its own stderr lines. Nothing may be written."""
    (tmp_path / "corpus").mkdir()
    os.mkfifo(tmp_path / "corpus" / "a.txt")
    command = [
        "zhlm-prepare",
        "--config=configs/macbert.py:tiny",
        "--input=corpus/*.txt",
        f"--data_dir={tmp_path / 'data'}",
        f"--beam_pipeline_options={options}",
    ] + ([f"--beam_runner={runner}"] if runner else [])
    env = _user_env(extra_path)
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert not (tmp_path / "data").exists()
    own = [line for line in done.stderr.strip().splitlines() if not LOG_LINE.match(line)]
    return done.returncode, own


CASES = {
    "dataflow without project": (
        "runner=DataflowRunner,region=us-central1,temp_location=gs://bucket/tmp",
        "",
        "zhlm-prepare: DataflowRunner needs project: add project=PROJECT to "
        "--beam_pipeline_options",
    ),
    "an unknown key": (
        "runner=DirectRunner,direct_num_worker=2",
        "",
        "zhlm-prepare: --beam_pipeline_options: direct_num_worker (closest: direct_num_workers)",
    ),
    "two runners": (
        "runner=DirectRunner",
        "DataflowRunner",
        "zhlm-prepare: --beam_runner=DataflowRunner and runner=DirectRunner",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refusal_is_one_line_and_exit_status_1(case, tmp_path):
    options, runner, want = CASES[case]
    status, own = _refused(tmp_path, options, runner=runner)
    assert status == 1 and len(own) == 1 and own[0].startswith(want), own


def test_without_apache_beam_the_line_says_what_to_install(tmp_path):
    """An ``apache_beam`` that cannot be imported, first on the path, stands for Beam missing."""
    missing = tmp_path / "no_beam" / "apache_beam"
    missing.mkdir(parents=True)
    (missing / "__init__.py").write_text("raise ImportError(\"No module named 'apache_beam'\")\n")
    status, own = _refused(tmp_path, "runner=DirectRunner", extra_path=str(missing.parent))
    assert status == 1 and own == [
        "zhlm-prepare: --beam_pipeline_options needs Apache Beam: pip install -e '.[beam]' in "
        "the zhlm checkout (and 'apache-beam[gcp]' for Dataflow)"
    ], own


def test_help_shows_the_flag_with_an_example():
    done = subprocess.run(
        ["zhlm-prepare", "--help"], env=_user_env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    flag = next(line for line in done.stdout.splitlines() if "--beam_pipeline_options:" in line)
    assert "runner=DirectRunner,direct_num_workers=2,direct_running_mode=multi_processing" in flag
    assert "runner=DataflowRunner,project=P,region=R,temp_location=gs://B/tmp" in flag
    assert "setup_file=./setup.py" in done.stdout and "apache-beam[gcp]" in done.stdout
