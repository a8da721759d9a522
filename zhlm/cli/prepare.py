r"""``zhlm-prepare``: raw Chinese text to the TFDS dataset a recipe trains on.

  zhlm-prepare --config=configs/macbert.py:tiny --input='corpus/*.txt' --data_dir=/tmp/zhlm-data

A corpus past one machine runs as an Apache Beam pipeline (pip install 'zhlm[beam]'), its
runner's options given as `tfds build` takes them: comma-separated key=value items.

  zhlm-prepare --config=configs/ernie.py --input='wiki=gs://B/wiki/*.jsonl.gz' \
      --input='news=gs://B/news/*.txt' --data_dir=gs://B/data \
      --beam_pipeline_options="runner=DataflowRunner,project=P,region=R,"\
"temp_location=gs://B/tmp,setup_file=./setup.py"

Dataflow also needs pip install -e '.[beam,gcs]' 'apache-beam[gcp]' here. Its workers get zhlm
from setup_file=./setup.py (run from the zhlm checkout: Beam builds zhlm's source package and
installs it on each worker; add requirements_file=FILE naming gcsfs for the gs:// paths) or
from requirements_file=FILE naming zhlm[beam,gcs]. README.md has the complete commands, for
Flink and Spark too. --beam_runner=NAME is the short form of runner=NAME.

Kept thin on purpose: flags in, :func:`zhlm.data.builder.prepare` does the work (and refuses a
runner's missing options before it reads the corpus), the report out. Several ``--input`` flags
name several sources (``name=GLOB``); the loader mixes them with ``--config.data.mixture``.
"""

from absl import app, flags
from ml_collections import config_flags

from zhlm.cli import failures, usage
from zhlm.data import beam_options

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe config file.", lock_config=True)
_INPUT = flags.DEFINE_multi_string("input", None, "Input glob, or name=GLOB for a named source.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "TFDS data directory to write.")
_PROCESSES = flags.DEFINE_integer("num_processes", 2, "Worker processes (local runner).")
_BEAM = flags.DEFINE_string(
    "beam_runner", None, "Run as an Apache Beam pipeline on this runner (short for runner=NAME)."
)
_BEAM_OPTIONS = flags.DEFINE_string(
    "beam_pipeline_options",
    None,
    "Apache Beam pipeline options as comma-separated key=value items, as `tfds build` takes "
    "them; e.g. runner=DirectRunner,direct_num_workers=2,direct_running_mode=multi_processing "
    "or runner=DataflowRunner,project=P,region=R,temp_location=gs://B/tmp,setup_file=./setup.py",
)
flags.mark_flags_as_required(["config", "input", "data_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    with failures.one_line("zhlm-prepare"):
        # Checked again by builder.prepare; here a refusal comes before TFDS is even imported.
        beam_options.pipeline_options(
            _BEAM.value, _BEAM_OPTIONS.value, _INPUT.value, _DATA_DIR.value
        )
        from zhlm.data import builder

        b, report = builder.prepare(
            config.data,
            config.recipe,
            _INPUT.value,
            _DATA_DIR.value,
            num_processes=_PROCESSES.value,
            beam_runner=_BEAM.value,
            beam_pipeline_options=_BEAM_OPTIONS.value,
        )
    print(f"dataset: {b.data_dir}")
    print(f"splits: { {k: v.num_examples for k, v in b.info.splits.items()} }")
    print(report.format())


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
