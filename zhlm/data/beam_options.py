"""Apache Beam pipeline options for ``zhlm-prepare``, in TFDS's convention, checked before any
work.

Why: a corpus past one machine is prepared on a Beam runner (Dataflow, Flink, Spark, or the
DirectRunner's worker processes), and each runner needs options of its own. They are given as
``tfds build --beam_pipeline_options`` takes them: one string of comma-separated ``key=value``
items (a bare ``key`` for a switch), each made ``--key=value`` for Beam's ``PipelineOptions``.
A runner that lacks what it needs fails late and far away (a Dataflow job dies on its workers
after minutes of start-up), so everything that can be known here is checked here, before the
corpus is read, and refused in one line that names what to add:

- Apache Beam installed (``pip install -e '.[beam]'``); the runner's name one Beam knows.
- Every key one of Beam's options (a typo would otherwise be ignored with a warning).
- Dataflow: ``project``, ``region`` and a ``gs://`` ``temp_location``; ``gs://`` inputs and data
  directory (its workers do not see this machine's disk); a way to install zhlm on the workers
  (``setup_file``, ``requirements_file``, ``extra_packages`` or ``sdk_container_image``); and
  Beam's Google Cloud client (``pip install 'apache-beam[gcp]'``).
- The portable runners: where the cluster's job service is (``job_endpoint``, or for Flink
  ``flink_master``, for Spark ``spark_master_url`` or ``spark_rest_url``).

``--beam_runner=NAME`` is the short form of ``runner=NAME``; given both, they must name the same
runner.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import logging

from zhlm.errors import UserError

FLAG = "--beam_pipeline_options"
# Where a portable runner submits the job: any one of these keys will do.
_JOB_SERVICE = {
    "PortableRunner": ("job_endpoint",),
    "FlinkRunner": ("flink_master", "job_endpoint"),
    "SparkRunner": ("spark_master_url", "spark_rest_url", "job_endpoint"),
}
# How Dataflow's workers get zhlm: a source package built from setup.py, a requirements file,
# a wheel, or a container image with zhlm in it.
_WORKER_INSTALL = ("setup_file", "requirements_file", "extra_packages", "sdk_container_image")


def pipeline_options(beam_runner: str | None, text: str | None, inputs, data_dir):
    """``(runner, PipelineOptions)`` for TFDS's ``DownloadConfig`` from ``--beam_runner`` and
    ``--beam_pipeline_options`` (``text``), or ``(None, None)`` when neither is given (the local
    processes run). Raises :class:`UserError` for anything the runner would fail on that is
    known before the run; ``inputs`` (``[name=]GLOB``) and ``data_dir`` are where the workers
    read and write."""
    if not beam_runner and not text:
        return None, None
    items = _items(text or "")
    try:
        with _quiet_logs():
            from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    except ImportError:
        raise UserError(
            f"{'--beam_runner' if beam_runner else FLAG} needs Apache Beam: "
            "pip install -e '.[beam]' in the zhlm checkout (and 'apache-beam[gcp]' for Dataflow)"
        ) from None
    flags = [f"--{item}" for item in items]
    values = _parse(PipelineOptions, flags)
    runner = _runner(values.get("runner"), beam_runner, StandardOptions)
    if beam_runner and not values.get("runner"):
        flags.append(f"--runner={runner}")
    given = {item.split("=", 1)[0].replace("-", "_") for item in items}
    if "Dataflow" in runner:
        _check_dataflow(runner, values, given, inputs, data_dir)
    if runner in _JOB_SERVICE and not given & set(_JOB_SERVICE[runner]):
        keys = " or ".join(f"{key}=HOST:PORT" for key in _JOB_SERVICE[runner])
        raise UserError(f"{runner} needs the cluster's job service: add {keys} to {FLAG}")
    return runner, PipelineOptions(flags)


@contextlib.contextmanager
def _quiet_logs():
    """Beam's import logs that its BigQuery clients are missing (two lines on every run): not
    zhlm's concern, and a refusal must stay one line."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


def _items(text: str) -> list[str]:
    """TFDS's split on commas (spaces around an item dropped); an empty item or one written as
    a flag is refused, since Beam would read it as something else (``--`` ends its options)."""
    items = [item.strip() for item in text.split(",")] if text else []
    for item in items:
        if not item.strip():
            raise UserError(f"{FLAG}={text!r} has an empty item: write key=value,key=value")
        if item.startswith("-"):
            raise UserError(f"{FLAG}: write {item.lstrip('-')!r} without the dashes (key=value)")
    return items


def _parse(pipeline_options, flags: list[str]) -> dict:
    """Beam's values for ``flags``, unknown keys refused with the closest known ones. Beam's
    parser (argparse) prints a bad value to stderr and exits: its last line is kept instead."""
    known = set(pipeline_options([]).get_all_options())
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            values = pipeline_options(flags).get_all_options(retain_unknown_options=True)
    except SystemExit:
        lines = stderr.getvalue().strip().splitlines() or ["a value Beam cannot read"]
        raise UserError(f"{FLAG}: {lines[-1].split('error: ', 1)[-1]}") from None
    unknown = sorted(set(values) - known)
    if unknown:
        parts = []
        for key in unknown:
            close = difflib.get_close_matches(key, known, n=3, cutoff=0.75)
            parts.append(key + (f" (closest: {', '.join(close)})" if close else ""))
        raise UserError(
            f"{FLAG}: {', '.join(parts)}: not one of Beam's pipeline options; "
            "check the spelling against Beam's names (temp_location, direct_num_workers, ...)"
        )
    return values


def _runner(from_options: str | None, from_flag: str | None, standard_options) -> str:
    """The runner's name as Beam spells it (Beam matches names case-insensitively, ``Direct``
    too), or a dotted path to a ``PipelineRunner`` class; refused when the two ways of giving
    it name different runners."""
    names = [_runner_name(name, standard_options) for name in (from_options, from_flag) if name]
    if len(set(names)) > 1:
        raise UserError(
            f"--beam_runner={from_flag} and runner={from_options} in {FLAG} name two runners: "
            "give the runner once"
        )
    return names[0] if names else standard_options.DEFAULT_RUNNER


def _runner_name(name: str, standard_options) -> str:
    known = {n.lower(): n for n in standard_options.KNOWN_RUNNER_NAMES}
    found = known.get(name.lower()) or known.get(name.lower() + "runner")
    if found:
        return found
    if "." in name:
        from apache_beam.runners.runner import PipelineRunner

        module, _, cls = name.rpartition(".")
        try:
            runner = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            runner = None
        if isinstance(runner, type) and issubclass(runner, PipelineRunner):
            return name
    close = difflib.get_close_matches(name, standard_options.KNOWN_RUNNER_NAMES, n=1, cutoff=0.6)
    hint = f" (closest: {', '.join(close)})" if close else ""
    raise UserError(
        f"Beam knows no runner {name!r}{hint}: use one of "
        f"{', '.join(standard_options.KNOWN_RUNNER_NAMES)} or a PipelineRunner's dotted path"
    )


def _check_dataflow(runner, values, given, inputs, data_dir) -> None:
    missing = [key for key in ("project", "region", "temp_location") if not values.get(key)]
    if missing:
        example = {"project": "PROJECT", "region": "REGION", "temp_location": "gs://BUCKET/tmp"}
        add = ",".join(f"{key}={example[key]}" for key in missing)
        raise UserError(f"{runner} needs {' and '.join(missing)}: add {add} to {FLAG}")
    if not values["temp_location"].startswith("gs://"):
        raise UserError(
            f"{runner} needs a gs:// temp_location, not {values['temp_location']!r}: "
            f"add temp_location=gs://BUCKET/tmp to {FLAG}"
        )
    for pattern in inputs:
        glob_ = pattern.rpartition("=")[2]  # [name=]GLOB, as zhlm.data.text reads it
        if not glob_.startswith("gs://"):
            raise UserError(
                f"{runner}'s workers cannot read the local --input {pattern!r}: copy the corpus "
                "to a bucket and pass --input=gs://BUCKET/..."
            )
    if not str(data_dir).startswith("gs://"):
        raise UserError(
            f"{runner}'s workers cannot write the local --data_dir {str(data_dir)!r}: "
            "pass --data_dir=gs://BUCKET/..."
        )
    if not given & set(_WORKER_INSTALL):
        raise UserError(
            f"{runner}'s workers need zhlm: add setup_file=./setup.py (from the zhlm checkout) "
            f"or requirements_file=FILE (a file naming zhlm[beam,gcs]) to {FLAG}"
        )
    try:
        importlib.import_module("apache_beam.runners.dataflow.internal.apiclient")
    except ImportError:
        raise UserError(
            f"{runner} needs Beam's Google Cloud client: pip install 'apache-beam[gcp]'"
        ) from None
