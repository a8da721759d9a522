"""curves.png: drawn from metrics.jsonl for a pretraining and a fine-tuning workdir, and one clear
error for a workdir with nothing to draw."""

import json
import subprocess
import sys

import pytest

from zhlm.train import curves

PNG = b"\x89PNG\r\n\x1a\n"


def _write(path, lines):
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_pretraining_and_fine_tuning_workdirs_are_drawn(tmp_path):
    pre = [
        {"step": s, "split": "train", "loss": 10 - s / 10, "mlm_accuracy": s / 100,
         "learning_rate": 1e-4, "tokens_per_sec": 1e3}
        for s in range(10, 60, 10)
    ] + [{"step": 50, "split": "eval", "loss": 6.0, "mlm_accuracy": 0.2}]  # fmt: skip
    _write(tmp_path / "pre", pre)
    fine = [
        {"step": e, "split": f"seed{s}", "train_loss": 1 / e, "f1": 10.0 * e + s}
        for s in (0, 1)
        for e in (1, 2, 3)
    ]
    _write(tmp_path / "fine", fine)
    for name in ("pre", "fine"):
        path = curves.plot(str(tmp_path / name))
        assert path == str(tmp_path / name / "curves.png")
        assert (tmp_path / name / "curves.png").read_bytes()[:8] == PNG


def test_nothing_to_draw_is_one_clear_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl has no lines"):
        curves.plot(str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "zhlm.cli.curves", f"--workdir={tmp_path}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "zhlm-curves:" in done.stderr
    assert "Traceback" not in done.stderr
