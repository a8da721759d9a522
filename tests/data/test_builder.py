"""TFDS dataset, the zhlm-prepare command and the loader, end to end on small real inputs.

Why these checks: the builder's output must not depend on how the work was split (1 or 2
processes; Beam uses the same shard function), the loader must give the same global batch for
any process count and resume exactly, and the command must run from flags alone.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import DATA, ROOT, load_config

from zhlm.data import annotate, builder, loader

CLUE = os.path.join(DATA, "corpus", "clue_small_docs.txt")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    with open(CLUE, encoding="utf-8") as f:
        docs = f.read().split("\n\n")
    (d / "news.txt").write_text("\n\n".join(docs[:80]) + "\n", encoding="utf-8")
    with open(annotate.resource("peoples_daily_199801_sample.txt"), encoding="utf-8") as f:
        pd = f.read().split("\n\n")
    (d / "pd.txt").write_text("\n\n".join(pd[:150]) + "\n", encoding="utf-8")
    (d / "bad.txt").write_bytes(b"\x00\xff\xfe\n\n" + "。。。\n\n好的。\n".encode())
    return [f"news={d / 'news.txt'}", f"pd={d / 'pd.txt'}", f"pd={d / 'bad.txt'}", f"pd={d}/no*"]


def _records(b, split):
    ds = b.as_data_source(split=split)
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(scope="module")
def prepared(inputs, tmp_path_factory):
    config = load_config("bert", "tiny")
    config.data.shard_mb = 0.05  # several shards per file, so both processes work
    out = {}
    for n in (1, 2):
        data_dir = str(tmp_path_factory.mktemp(f"tfds{n}"))
        out[n] = builder.prepare(config.data, config.recipe, inputs, data_dir, n, progress=False)
    return config, out


@pytest.mark.slow
def test_prepare_same_output_for_any_process_count(prepared):
    _, out = prepared
    (b1, r1), (b2, r2) = out[1], out[2]
    assert set(b1.info.splits) == {"news", "pd"}
    for split in ("news", "pd"):
        a, b = _records(b1, split), _records(b2, split)
        assert len(a) == len(b) > 10
        for x, y in zip(a, b, strict=True):
            assert all(np.array_equal(x[k], y[k]) for k in x)
    assert r1.counts == r2.counts and r1.reasons == r2.reasons
    assert r1.reasons["empty_glob"] == 1 and r1.reasons["non_utf8_bytes"] == 2
    news = r1.per_source["news"]  # records are rows: packed ones hold several instances
    assert news.get("packed_rows", news["instances"]) == b1.info.splits["news"].num_examples
    assert b1.info.metadata["report"]["counts"]["instances"] == r1.counts["instances"]
    assert os.path.exists(os.path.join(b1.data_dir, "report.txt"))


@pytest.mark.slow
def test_loader_deterministic_sharded_resumable(prepared):
    config, out = prepared
    path = out[1][0].data_dir

    def make(index=0, count=1, mixture=""):
        return loader.Loader(path, mixture, 8, seed=3, process_index=index, process_count=count)

    whole = make()
    batches = [next(whole) for _ in range(6)]
    assert batches[0]["input_ids"].shape == (8, config.data.max_seq_length)
    again = make()
    assert all(np.array_equal(next(again)["input_ids"], b["input_ids"]) for b in batches)
    # two processes: their halves make the same global batches
    p0, p1 = make(0, 2), make(1, 2)
    for b in batches:
        got = np.concatenate([next(p0)["input_ids"], next(p1)["input_ids"]])
        assert np.array_equal(got, b["input_ids"])
    # resume from a saved position
    part = make()
    for _ in range(3):
        next(part)
    state = part.get_state()
    resumed = make()
    resumed.set_state(state)
    for b in batches[3:]:
        assert np.array_equal(next(resumed)["input_ids"], b["input_ids"])


@pytest.mark.slow
def test_loader_mixture_weights_and_epochs(prepared):
    _, out = prepared
    b = out[1][0]
    only_news = loader.Loader(b.data_dir, "news:1,pd:0", 4, process_index=0, process_count=1)
    n = b.info.splits["news"].num_examples
    for _ in range(n // 4 + 2):
        next(only_news)
    state = only_news.get_state()
    assert state["served"]["pd"] == 0 and state["served"]["news"] == 4 * (n // 4 + 2)
    assert only_news.sampler.epoch("news") == 1  # wrapped into a second epoch
    # A weight-0 source is evaluation-only: up to `holdout` of its records held out, not a fifth.
    held = loader.Loader(b.data_dir, "news:1,pd:0", 4, 0, 0, 1, holdout=10_000)
    total = {name: split.num_examples for name, split in b.info.splits.items()}
    assert held.held == {"news": total["news"] // 5, "pd": total["pd"]}
    assert held.sizes == {"news": total["news"] - total["news"] // 5, "pd": 0}
    assert held.sampler.epoch("pd") == 0
    sources = [source for source, _ in held.eval_batches()]
    assert sources.count("pd") == total["pd"] // 4
    with pytest.raises(ValueError, match="mixture"):
        loader.Loader(b.data_dir, "wiki:1", 4, process_index=0, process_count=1)


@pytest.mark.slow
def test_inputs_that_give_no_sequence_say_why_and_what_to_pass(tmp_path):
    """A dialogue file given as a text source: one error naming the dialogue flags, not TFDS's
    "No examples were yielded"."""
    with open(os.path.join(DATA, "dialogue", "dialogues.jsonl"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(20)]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    config = load_config("ernie", "tiny")
    with pytest.raises(ValueError) as err:
        builder.prepare(
            config.data, config.recipe, [str(path)], str(tmp_path / "d"), 1, progress=False
        )
    message = str(err.value)
    assert message.startswith(f"no training sequence came out of {path}"), message
    assert "dialogue_in_text_source 20" in message
    assert f"--config.data.input=\"('dialogue={path}',)\"" in message
    assert "--config.data.dialogue_sources=\"('dialogue',)\"" in message


def test_zhlm_prepare_command(inputs, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "zhlm.cli.prepare",
        "--config=configs/spanbert.py:tiny",
        f"--input={inputs[0]}",
        f"--data_dir={tmp_path}",
        "--num_processes=1",
        "--config.data.max_seq_length=64",
    ]
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "instances" in done.stdout and "spanbert_doc_sentences_64" in done.stdout
    bad = subprocess.run(
        cmd[:4] + ["--input=/no/such/*.txt", f"--data_dir={tmp_path}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "matched nothing" in bad.stderr
    typo = subprocess.run(
        cmd + ["--config.data.formatt=sop"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert typo.returncode != 0  # locked config


def test_workers_do_not_import_the_callers_main(inputs, tmp_path):
    """Forkserver workers would re-run ``__main__`` (for a script that imports JAX, over a
    second of start-up each); ``pipeline.run_local`` starts them with an empty one."""
    marker = tmp_path / "imports.txt"
    script = tmp_path / "main.py"
    script.write_text(
        f"""
import sys
with open({str(marker)!r}, "a") as f:
    f.write("imported\\n")
from zhlm.config_files import load as load_config
from zhlm.data import pipeline, text

if __name__ == "__main__":
    config = load_config("bert", "tiny").data
    shards = text.expand_inputs([{inputs[0]!r}], text.Report(), 20_000)
    assert len(shards) >= 2
    done = list(pipeline.run_local(shards, config, 2, text.Report(), progress=False))
    print(len(done), "shards")
"""
    )
    env = dict(os.environ, PYTHONPATH=ROOT)
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "shards" in run.stdout
    assert marker.read_text() == "imported\n"  # the parent only
