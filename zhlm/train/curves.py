"""``curves.png``: a run's ``metrics.jsonl`` drawn, for the person who would rather look than read.

One drawing for both kinds of run, because both write the same lines (``step``, ``split``,
scalars; ``zhlm.train.metrics.Writer``) over steps: pretraining has the splits ``train`` and
``eval``, fine-tuning one split per seed (``seed0``, ``seed1``, ...), its dev scores at each
epoch's last step. Three panels: the
losses, the accuracies and scores, and the learning rate where it was logged. ``zhlm-pretrain``
and ``zhlm-finetune`` draw it when they finish; ``zhlm-curves --workdir=DIR`` draws it for any
workdir, also while a run is going.
"""

import io

from zhlm import run_files
from zhlm.errors import NotFound
from zhlm.train import metrics

CURVES = "curves.png"
SCORES = ("accuracy", "f1", "em", "precision", "recall", "average")
PANELS = (
    ("loss", lambda key: key.endswith("loss")),
    ("accuracy / score", lambda key: key.endswith(SCORES)),
    ("learning rate", lambda key: key == "learning_rate"),
)


def plot(workdir: str) -> str:
    """Draws ``workdir/metrics.jsonl`` into ``workdir/curves.png``; returns the PNG's path."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")  # files only: no display on a TPU VM or in CI
    import matplotlib.pyplot as plt

    lines = metrics.read(workdir, split=None)
    if not lines:
        raise NotFound(f"{workdir}: {run_files.METRICS} has no lines to draw")
    splits = list(dict.fromkeys(line["split"] for line in lines))
    panels = [(t, [k for k in _keys(lines) if keep(k)]) for t, keep in PANELS]
    panels = [(title, keys) for title, keys in panels if keys]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (title, keys) in zip(axes[0], panels, strict=True):
        for split in splits:
            for key in keys:
                points = [
                    (ln["step"], ln[key]) for ln in lines if ln["split"] == split and key in ln
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, label=f"{split} {key}")
        ax.set(title=title, xlabel="step")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle(str(run_files.path(workdir)), fontsize="small")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    out = run_files.path(workdir, CURVES)
    out.write_bytes(buffer.getvalue())  # through epath: a gs:// workdir works too
    return str(out)


def _keys(lines) -> list:
    keys = dict.fromkeys(k for line in lines for k in line if k not in ("step", "split"))
    return list(keys)
