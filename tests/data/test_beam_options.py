"""Beam pipeline options in TFDS's ``key=value,...`` form: what a runner lacks is refused in one
line naming what to add, through ``builder.prepare`` before any input is globbed or read and
before the data directory is made; what a runner has goes to TFDS as Beam's
``PipelineOptions``.

Why: a Dataflow or Flink job that lacks an option fails late (minutes of worker start-up) and
far away (in the runner's logs); everything knowable on the launching machine is checked there.
"""

import sys

import pytest
from helpers import load_config

from zhlm.data import beam_options, builder, text
from zhlm.errors import UserError

pytest.importorskip("apache_beam")

GS_IN, GS_OUT = ["news=gs://bucket/news/*.txt"], "gs://bucket/data"
DATAFLOW = "runner=DataflowRunner,project=p,region=us-central1,temp_location=gs://bucket/tmp"
WORKERS = "setup_file=./setup.py"

# (options, --beam_runner, inputs, data_dir or None for a local one, what the line must say)
REFUSED = {
    "dataflow without project": (
        "runner=DataflowRunner,region=us-central1,temp_location=gs://bucket/tmp",
        None,
        GS_IN,
        GS_OUT,
        "DataflowRunner needs project: add project=PROJECT to --beam_pipeline_options",
    ),
    "dataflow without region and temp_location": (
        "runner=DataflowRunner,project=p",
        None,
        GS_IN,
        GS_OUT,
        "DataflowRunner needs region and temp_location: "
        "add region=REGION,temp_location=gs://BUCKET/tmp to --beam_pipeline_options",
    ),
    "dataflow with a local temp_location": (
        "runner=DataflowRunner,project=p,region=r,temp_location=/tmp/t",
        None,
        GS_IN,
        GS_OUT,
        "DataflowRunner needs a gs:// temp_location, not '/tmp/t'",
    ),
    "dataflow with a local input": (
        f"{DATAFLOW},{WORKERS}",
        None,
        None,
        GS_OUT,
        "DataflowRunner's workers cannot read the local --input",
    ),
    "dataflow with a local data_dir": (
        f"{DATAFLOW},{WORKERS}",
        None,
        GS_IN,
        None,
        "DataflowRunner's workers cannot write the local --data_dir",
    ),
    "dataflow by --beam_runner without project": (
        "region=us-central1,temp_location=gs://bucket/tmp",
        "DataflowRunner",
        GS_IN,
        GS_OUT,
        "DataflowRunner needs project",
    ),
    "dataflow without zhlm on the workers": (
        DATAFLOW,
        None,
        GS_IN,
        GS_OUT,
        "DataflowRunner's workers need zhlm: add setup_file=./setup.py",
    ),
    "flink without a job service": (
        "runner=FlinkRunner,environment_type=DOCKER",
        None,
        None,
        None,
        "FlinkRunner needs the cluster's job service: add flink_master=HOST:PORT or "
        "job_endpoint=HOST:PORT to --beam_pipeline_options",
    ),
    "spark without a job service": (
        "runner=spark",
        None,
        None,
        None,
        "SparkRunner needs the cluster's job service: add spark_master_url=HOST:PORT",
    ),
    "portable without a job endpoint": (
        "runner=PortableRunner",
        None,
        None,
        None,
        "PortableRunner needs the cluster's job service: add job_endpoint=HOST:PORT",
    ),
    "an unknown key": (
        "runner=DirectRunner,direct_num_worker=2",
        None,
        None,
        None,
        "--beam_pipeline_options: direct_num_worker (closest: direct_num_workers): "
        "not one of Beam's pipeline options",
    ),
    "a value Beam cannot read": (
        "direct_running_mode=multi_process",
        None,
        None,
        None,
        "--beam_pipeline_options: argument --direct_running_mode: invalid choice: 'multi_process'",
    ),
    "an empty item": (
        "runner=DirectRunner,,direct_num_workers=2",
        None,
        None,
        None,
        "--beam_pipeline_options='runner=DirectRunner,,direct_num_workers=2' has an empty item: "
        "write key=value,key=value",
    ),
    "an unknown runner": (
        "runner=FlinkRuner",
        None,
        None,
        None,
        "Beam knows no runner 'FlinkRuner' (closest: FlinkRunner): use one of",
    ),
    "an unknown runner by --beam_runner": (
        None,
        "Dataflow.NoSuchRunner",
        None,
        None,
        "Beam knows no runner 'Dataflow.NoSuchRunner'",
    ),
    "two runners": (
        "runner=DirectRunner",
        "DataflowRunner",
        GS_IN,
        GS_OUT,
        "--beam_runner=DataflowRunner and runner=DirectRunner in --beam_pipeline_options name "
        "two runners: give the runner once",
    ),
}


@pytest.fixture
def no_corpus_read(monkeypatch):
    """Globbing the inputs (the first thing the builder does with them) fails the test."""

    def read(*args, **kwargs):
        raise AssertionError("the corpus was read")

    monkeypatch.setattr(text, "expand_inputs", read)


def _refusal(options, runner, inputs, data_dir, tmp_path) -> str:
    local_input = tmp_path / "corpus.txt"
    local_input.write_text("今天天气很好。\n", encoding="utf-8")
    config = load_config("macbert", "tiny")
    with pytest.raises(UserError) as refused:
        builder.prepare(
            config.data,
            config.recipe,
            inputs or [f"news={local_input}"],
            data_dir or str(tmp_path / "data"),
            beam_runner=runner,
            beam_pipeline_options=options,
            progress=False,
        )
    assert not (tmp_path / "data").exists()
    return str(refused.value)


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_runner_that_lacks_something_is_refused_in_one_line(case, tmp_path, no_corpus_read):
    options, runner, inputs, data_dir, want = REFUSED[case]
    line = _refusal(options, runner, inputs, data_dir, tmp_path)
    assert "\n" not in line and line.startswith(want), line


def test_dataflow_without_beams_google_cloud_client(tmp_path, no_corpus_read, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam.runners.dataflow.internal.apiclient", None)
    line = _refusal(f"{DATAFLOW},{WORKERS}", None, GS_IN, GS_OUT, tmp_path)
    assert line == (
        "DataflowRunner needs Beam's Google Cloud client: pip install 'apache-beam[gcp]'"
    )


def test_without_apache_beam(tmp_path, no_corpus_read, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    monkeypatch.setitem(sys.modules, "apache_beam.options.pipeline_options", None)
    line = _refusal("runner=DirectRunner", None, None, None, tmp_path)
    assert line.startswith("--beam_pipeline_options needs Apache Beam: pip install -e '.[beam]'")
    line = _refusal(None, "DirectRunner", None, None, tmp_path)
    assert line.startswith("--beam_runner needs Apache Beam")


def test_what_a_runner_has_reaches_beam():
    runner, options = beam_options.pipeline_options(
        None,
        "runner=DirectRunner,direct_num_workers=2,direct_running_mode=multi_processing",
        ["/local/*.txt"],
        "/local/data",
    )
    values = options.get_all_options()
    assert runner == "DirectRunner" and values["runner"] == "DirectRunner"
    assert values["direct_num_workers"] == 2
    assert values["direct_running_mode"] == "multi_processing"
    # --beam_runner is runner=NAME: as Beam spells it, alone or beside the same runner
    for flag, text_ in [("direct", None), ("DirectRunner", "runner=directrunner")]:
        runner, options = beam_options.pipeline_options(flag, text_, ["a"], "b")
        assert runner == "DirectRunner" and options.get_all_options()["runner"] in (
            "DirectRunner",
            "directrunner",
        )
    assert beam_options.pipeline_options(None, None, ["a"], "b") == (None, None)


def test_a_complete_cluster_command_is_accepted():
    """The README's Dataflow and portable-runner options pass every check (nothing runs)."""
    runner, options = beam_options.pipeline_options(
        None,
        "runner=FlinkRunner,flink_master=flink-host:8081,environment_type=DOCKER,"
        "setup_file=./setup.py",
        ["news=/shared/news/*.txt"],
        "/shared/data",
    )
    assert runner == "FlinkRunner"
    assert options.get_all_options()["flink_master"] == "flink-host:8081"
    runner, options = beam_options.pipeline_options(
        None, " runner=PortableRunner , job_endpoint=job-server:8099", ["a"], "b"
    )
    assert options.get_all_options()["job_endpoint"] == "job-server:8099"
