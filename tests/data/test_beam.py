"""The same builder as an Apache Beam pipeline (DirectRunner) writes exactly what the
multi-process path writes.

Why: a terabyte corpus is prepared on Dataflow/Spark/Flink with ``--beam_runner``; this is the
local proof that the Beam path is the same computation. Skipped when the optional
``apache-beam`` extra is not installed.
"""

import os

import numpy as np
import pytest
from etils import epath
from helpers import DATA, load_config

from zhlm.data import builder


@pytest.mark.slow
def test_beam_direct_runner_output_identical(tmp_path):
    pytest.importorskip("apache_beam")
    with open(os.path.join(DATA, "corpus", "clue_small_docs.txt"), encoding="utf-8") as f:
        docs = f.read().split("\n\n")
    (tmp_path / "a.txt").write_text("\n\n".join(docs[:60]) + "\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("\n\n".join(docs[60:100]) + "\n", encoding="utf-8")
    config = load_config("macbert", "tiny")
    config.data.shard_mb = 0.05
    inputs = [str(tmp_path / "*.txt")]
    local, local_report = builder.prepare(
        config.data, config.recipe, inputs, str(tmp_path / "mp"), 2, progress=False
    )
    beam, beam_report = builder.prepare(
        config.data,
        config.recipe,
        inputs,
        str(tmp_path / "beam"),
        beam_runner="DirectRunner",
        progress=False,
    )
    a, b = local.as_data_source(split="train"), beam.as_data_source(split="train")
    assert len(a) == len(b) > 50
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x), i
    # The report too: merged on the workers, read back, in the metadata and in report.txt.
    want, got = local_report.to_dict(), beam_report.to_dict()
    rows = got["counts"].get("packed_rows", got["counts"]["instances"])  # packed: several a row
    assert rows == len(b) and got["counts"]["documents"] > 50
    for key in ("counts", "reasons", "per_source"):
        assert got[key] == want[key], key
    assert sorted(got["messages"]) == sorted(want["messages"])
    assert beam.info.metadata["report"]["counts"] == want["counts"]
    assert not list((tmp_path / "beam").rglob("beam-report-*"))  # read back and removed
    head = local_report.format().split("examples:")[0]  # message order may differ
    assert (epath.Path(beam.data_dir) / "report.txt").read_text().startswith(head)
