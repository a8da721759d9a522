"""``zhlm-curves``: draw ``curves.png`` for any pretraining or fine-tuning workdir.

  zhlm-curves --workdir=/tmp/zhlm

The runs draw it themselves when they finish; this draws it on demand, e.g. while a long run
is going or for a workdir copied down from a bucket. Kept thin: :func:`zhlm.train.curves.plot`.
"""

from absl import app, flags

from zhlm.cli import failures, usage

_WORKDIR = flags.DEFINE_string("workdir", None, "A zhlm-pretrain or zhlm-finetune workdir.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    with failures.one_line("zhlm-curves"):
        from zhlm.train import curves

        print(f"zhlm-curves: wrote {curves.plot(_WORKDIR.value)}")


def run():
    """Console-script entry point."""
    usage.run(main)


if __name__ == "__main__":
    run()
