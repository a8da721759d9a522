"""zhlm-compile's plan: the real pretraining step compiled for Cloud TPU slices on this CPU.

libtpu's compiler runs anywhere, so what must hold on a pod is checked here: the program fits,
FSDP shards the state, the FLOP estimate matches zhlm's formula, and multi-slice keeps every
parameter collective inside a slice. Compiles are small (structure, not scale) and marked slow.
"""

import subprocess
import sys

import pytest
from helpers import ROOT

from zhlm import config_files
from zhlm.train import hlo_stats, metrics, plan, tpu

pytest.importorskip("libtpu", reason="zhlm-compile needs libtpu (the test extra installs it)")


def _config(spec="bert:tiny", batch=16, fsdp=1, **model):
    config = config_files.load(spec)
    config.train.batch_size = batch
    config.train.mesh = (("data", -1), ("fsdp", fsdp), ("tensor", 1))
    config.model.dtype = "bfloat16"
    config.model.update(model)
    return config


def test_accelerator_types_follow_cloud_tpu_names():
    cases = {
        "v4-8": ("v4:2x2x1", 4),
        "v4-32": ("v4:2x2x4", 16),
        "v4-128": ("v4:4x4x4", 64),
        "v4-4096": ("v4:8x16x16", 2048),
        "v5litepod-1": ("v5e:1x1", 1),
        "v5litepod-8": ("v5e:2x4", 8),
        "v5litepod-256": ("v5e:16x16", 256),
        "v5p-8": ("v5:2x2x1", 4),
        "v6e-64": ("v6e:8x8", 64),
        "v4-384:4x4x12": ("v4:4x4x12", 192),
    }
    for name, (topology, chips) in cases.items():
        s = tpu.parse(name)
        assert (s.topology_name, s.num_chips) == (topology, chips), name
    assert tpu.parse("v5litepod-16", num_slices=4).num_chips == 64
    for bad in ("v4-7", "v5litepod-12", "v9-8", "tpu"):
        with pytest.raises(ValueError):
            tpu.parse(bad)


def test_state_per_chip_falls_as_one_over_fsdp():
    _, _, state1, _ = plan.build(_config(batch=8, fsdp=1), "v4-16")
    _, _, state8, _ = plan.build(_config(batch=8, fsdp=8), "v4-16")
    ratio = plan.per_chip_bytes(state8) / plan.per_chip_bytes(state1)
    # Biases and layer norms ('norm', 'kv' axes) stay whole: a little over 1/8.
    assert 1 / 8 <= ratio < 1.1 / 8, ratio


def test_a_program_that_cannot_fit_fails_before_compiling(monkeypatch):
    def never(*args):
        raise AssertionError("compiled a program whose state alone does not fit")

    monkeypatch.setattr(plan, "_compile_step", never)
    config = _config("bert:large", batch=8, num_layers=240)  # ~3B parameters, 36 GB of state
    with pytest.raises(plan.DoesNotFit, match=r"optimizer state \d+\.\d\d GB .* 16\.00 GB HBM"):
        plan.compile_plan(config, "v5litepod-8")


HLO = """
%body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
  %p = (s32[], f32[8]) parameter(0)
  %ag = bf16[4,256]{1,0} all-gather(%x), channel_id=1, replica_groups=mesh['a'=2,'b'=4] {'b'}
  ROOT %t = (s32[], f32[8]) tuple(%i, %ag)
}

%cond (p: (s32[], f32[8])) -> pred[] {
  %p = (s32[], f32[8]) parameter(0)
  %c = s32[] constant(12)
  ROOT %lt = pred[] compare(%i, %c), direction=LT
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %w = (s32[], f32[8]) while(%init), condition=%cond, body=%body
  %ar = f32[1024]{0} all-reduce(%g), channel_id=2, replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add
  ROOT %r = f32[8] get-tuple-element(%w), index=1
}
"""


def test_collectives_are_counted_per_step_and_by_slice():
    slice_of = [0, 0, 0, 0, 1, 1, 1, 1]  # two slices of four devices
    stats = hlo_stats.collectives(HLO, slice_of)
    gather, reduce = stats["all-gather"], stats["all-reduce"]
    assert (gather["count"], gather["bytes"], gather["in_loop"]) == (12, 12 * 4 * 256 * 2, 1)
    assert gather["cross_slice_bytes"] == 0  # groups {0..3}, {4..7}: inside a slice
    assert (reduce["count"], reduce["bytes"]) == (1, 4096)
    assert reduce["cross_slice_bytes"] == 4096  # groups {0,4}, {1,5}, ...: over DCN
    assert hlo_stats.trip_counts(HLO) == [12]


def test_cli_reports_a_plan_that_cannot_fit_with_its_numbers():
    args = ["--config=" + config_files.path("bert") + ":large", "--topology=v5litepod-8"]
    args += ["--config.model.num_layers=240", "--config.model.dtype=bfloat16"]
    r = subprocess.run(
        [sys.executable, "-m", "zhlm.cli.compile", *args], capture_output=True, text=True
    )
    assert r.returncode != 0
    assert "zhlm-compile: v5litepod-8: parameters + optimizer state" in r.stderr, r.stderr[-2000:]


@pytest.fixture(scope="module")
def small_plan():
    # BERT-base's width with two layers and no dropout: the matmuls dominate as they do at scale
    # (at width 512 softmax, GELU, LayerNorm and dropout's random bits add 7%). Both dropouts
    # off: their random bits are FLOPs the formula does not count. Two sequences per chip:
    # compiled FLOPs 1.043x the formula (1.022x at eight, 1.071x at one) in 53 s on 2 cores,
    # where eight took 118 s.
    config = _config("bert:base", batch=16, fsdp=8, num_layers=2)
    config.model.dropout_rate = config.model.attention_dropout_rate = 0.0
    return plan.compile_plan(config, "v5litepod-8")


@pytest.mark.slow
def test_a_small_recipe_compiles_for_a_v5e_slice_and_fits(small_plan):
    memory = small_plan["memory"]
    assert small_plan["chips"] == 8 and small_plan["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1}
    assert memory["fits"] and 0 < memory["total_bytes"] < 1e9
    assert memory["alias_bytes"] >= 0.9 * memory["state_bytes"]  # the state is donated
    assert small_plan["collectives"]["all-gather"]["in_loop"] > 0  # FSDP gathers per layer


@pytest.mark.slow
def test_flop_estimate_agrees_with_the_mfu_formula(small_plan):
    flops = small_plan["flops"]
    # cost_analysis alone counts the scanned layer once; the plan adds the other application.
    assert flops["step_cost_analysis_flops"] < flops["flops"]
    assert flops["flops"] == pytest.approx(flops["model_flops"], rel=0.05)
    assert small_plan["time"]["mfu"] <= 1.0
    assert metrics.PEAK_FLOPS[small_plan["chip"]["device_kind"]] == small_plan["chip"]["peak_flops"]


@pytest.fixture(scope="module")
def two_slices():
    # data=2 spans the slices, fsdp=4 inside each; 16 sequences per chip. At 2 per chip XLA
    # all-gathers the MLM transform's 10 KB activation gradient over DCN instead of reducing
    # its 64 KB kernel gradient there: cheaper at that size, and not what a real batch does.
    config = _config(batch=128, fsdp=4)
    return plan.compile_plan(config, "v5litepod-4", num_slices=2)


def _crossing(p):
    return [
        (kind, op) for kind, c in p["collectives"].items() for op in c["ops"] if op["cross_slice"]
    ]


@pytest.mark.slow
def test_two_slices_keep_parameter_collectives_inside_a_slice(two_slices):
    assert two_slices["mesh"] == {"data": 2, "fsdp": 4, "tensor": 1}
    comms = two_slices["collectives"]
    assert comms["all-gather"]["count"] > 0 and comms["reduce-scatter"]["count"] > 0
    assert comms["all-reduce"]["cross_slice_bytes"] > 0  # the gradients, reduced over DCN
    # Nothing of the forward pass (the parameters' FSDP gathers) leaves a slice.
    forward = [op for _, op in _crossing(two_slices) if "jvp(" in op["op"]]
    assert all("transpose(jvp(" in op["op"] for op in forward), forward


@pytest.mark.slow
def test_two_slices_send_only_gradient_reductions_over_dcn(two_slices):
    # Before the word embedding was read through one ("vocab", None) layout, the embedding
    # LayerNorm's activation gradient was all-gathered over DCN at every batch size.
    assert {kind for kind, _ in _crossing(two_slices)} == {"all-reduce"}


def _tools_module(name):
    import importlib
    import os

    tools = os.path.join(ROOT, "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    return importlib.import_module(name)


def test_host_plan_compares_each_host_with_the_loader():
    v6e, v4 = tpu.CHIPS["v6e"], tpu.CHIPS["v4"]
    h = plan.host_plan(v6e, 16, 16 * 3000.0, loader_rate=20000.0)  # two hosts of 8 chips
    assert (h["hosts"], h["chips_per_host"]) == (2, 8)
    assert h["sequences_per_second_per_host"] == pytest.approx(24000.0)
    assert h["one_process_suffices"] is False and h["full_host_one_process_suffices"] is False
    one = plan.host_plan(v6e, 1, 3000.0, loader_rate=20000.0)  # v6e-1: one chip on its host
    assert one["one_process_suffices"] and not one["full_host_one_process_suffices"]
    assert plan.host_plan(v4, 4, 4000.0)["one_process_suffices"] is None  # no rate: no verdict
    assert plan.host_plan(v4, 4, 4000.0)["full_host_sequences_per_second"] == 4000.0


def _fake_cell(topology, chips, step_seconds, fits=True):
    p = dict(
        chips=chips,
        remat="none",
        memory=dict(total_bytes=5e9, hbm_bytes=16e9, fits=fits),
        time=dict(step_seconds=step_seconds, bound="hbm", mfu=0.4, mfu_without_hbm=0.8),
        host=plan.host_plan(tpu.parse(topology).chip, chips, 256 / step_seconds, 25000.0),
    )
    return dict(topology=topology, per_chip=32, micro_batches=8, plan=p, days=0.0)


def test_tpu_plan_table_days_hosts_and_sources_from_plans(monkeypatch):
    tp = _tools_module("tpu_plan")
    run = tp.Run("R", "bert", "base", 256, 128, 864_000, "Paper, Table 9", verified=False)

    def cell(r, generation, workdir, loader_rate, find, cached_only):
        c = _fake_cell("v5litepod-1", 1, 0.5)
        c["days"] = r.steps * c["plan"]["time"]["step_seconds"] / tp.DAY
        return c

    monkeypatch.setattr(tp, "plan_cell", cell)
    text = tp.table([run], ["v5litepod"], "/nonexistent", loader_rate=25000.0)
    row = next(line for line in text.splitlines() if line.startswith("| R |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1] == "256 x 128, 864,000 (unverified) [1]"
    assert cells[3] == "v5litepod-1 (1 chips)" and cells[4] == "32 x 8, none"
    assert cells[7] == "5.0"  # 864,000 steps x 0.5 s = 5 days
    assert cells[9].startswith("512 (full host 4,096)")  # 256 sequences / 0.5 s, x 8 chips
    assert cells[10] == "yes; full host of 8: yes"
    # 5 days on one chip: 30 days needs no more than the one chip
    assert cells[11] == "v5litepod-1"
    assert "[1] Paper, Table 9" in text and "76 minutes" in text
    scaled = dict(_fake_cell("v5litepod-1", 1, 0.5), days=100.0)
    assert tp.chips_for(scaled, run, "v5litepod", 30.0) == "v5litepod-4"  # 100/4 = 25 days
    assert tp.chips_for(scaled, run, "v5litepod", 0.1) is None  # > 256 chips: past the batch


def test_micro_batch_choice_is_a_power_of_two_dividing_the_per_chip_batch():
    tp = _tools_module("tpu_plan")
    assert tp._powers_of_two_dividing(24) == [8, 4, 2, 1]
    run = tp.Run("R", "bert", "base", 256, 128, 1000, "")
    mc = plan.build(tp.run_config(run), "v5litepod-1")[1].model.config
    b = tp.choose_micro_batch(run, "v5litepod-1", 1.3e9, mc, "none")
    assert b in (8, 16, 32, 64) and 256 % b == 0  # 111 MB a sequence measured: ~50 fit


def test_plan_cache_serves_only_this_compilers_whole_plans(tmp_path, monkeypatch):
    """The JSON cache without compiling (compile_plan and program_id faked): a plan by another
    compiler is not current, a file that is not a plan is compiled over, and the MFU a plan
    shows is zhlm's formula of today, not the one stored."""
    import json

    tp = _tools_module("tpu_plan")
    compiles = []

    def fake_compile(config, topology):
        compiles.append(topology)
        comm = dict(bytes=4e9, cross_slice_bytes=0.0, ops=["all-reduce.1"])
        time = dict(step_seconds=1.0, sequences_per_second=1.0, mfu=0.5, mfu_without_hbm=0.5)
        flops = dict(flops=5e14, bytes_accessed=4e11, model_flops=1.0)
        return dict(flops=flops, collectives={"all-reduce": comm}, time=time)

    monkeypatch.setattr(plan, "compile_plan", fake_compile)
    monkeypatch.setattr(tp, "program_id", lambda config, topology: "p1")
    config, workdir = tp.run_config(tp.QUICK_RUNS[0]), str(tmp_path)
    first = tp.cached_plan(config, "v5litepod-1", workdir, loader_rate=25000.0)
    (path,) = tmp_path.glob("plan-*.json")
    stored = json.loads(path.read_text())
    assert stored["compiler"] == tp.compiler() and "libtpu" in stored["compiler"]
    assert "ops" not in stored["collectives"]["all-reduce"] and len(compiles) == 1
    # Recomputed on read: 5e14 FLOPs at v5e's 197 TFLOP/s bound the step (HBM 0.49 s).
    model_flops = first["flops"]["model_flops"]
    assert first["time"]["bound"] == "compute" and first["time"]["mfu"] == pytest.approx(
        model_flops / 5e14
    )
    stored["time"]["mfu"] = 123.0  # as written by an older MFU formula
    path.write_text(json.dumps(stored))
    again = tp.cached_plan(config, "v5litepod-1", workdir, loader_rate=25000.0)
    assert again["time"] == first["time"] and not again["stale_code"] and len(compiles) == 1

    stored["compiler"] = "jax 0.0.1, jaxlib 0.0.1, libtpu none"
    path.write_text(json.dumps(stored))
    with pytest.raises(tp.NotCached):
        tp.cached_plan(config, "v5litepod-1", workdir, cached_only=True)
    assert tp.cached_plan(config, "v5litepod-1", workdir, cached_only=True, stale=True)[
        "stale_code"
    ]
    assert not tp.cached_plan(config, "v5litepod-1", workdir)["stale_code"]  # compiled anew
    assert len(compiles) == 2 and json.loads(path.read_text())["compiler"] == tp.compiler()

    path.write_text('{"time": ')  # cut short
    (tmp_path / "plan-0-0.json").write_text("[]")  # not a plan
    assert tp.cached_plan(config, "v5litepod-1", workdir)["time"] == first["time"]
    assert len(compiles) == 3 and not list(tmp_path.glob("*.tmp"))

    # Another config (another file name) whose step lowers to the same program: a copy.
    other = tp.run_config(tp.QUICK_RUNS[0])
    other.train.num_steps += 1
    assert tp.cached_plan(other, "v5litepod-1", workdir)["time"] == first["time"]
    assert len(compiles) == 3 and len(list(tmp_path.glob("plan-*.json"))) == 3


@pytest.mark.slow
def test_tpu_plan_quick_compiles_once_then_reads_its_cache(tmp_path, monkeypatch):
    tp = _tools_module("tpu_plan")
    text = tp.tpu_plan_table(workdir=str(tmp_path), quick=True, loader_rate=25000.0)
    row = next(line for line in text.splitlines() if line.startswith("| tiny"))
    assert "| v5litepod | v5litepod-1 (1 chips) | 32 x 1, none |" in row, row
    assert "(older step code" not in row
    assert len(list(tmp_path.glob("plan-*.json"))) == 1

    def never(*args, **kwargs):
        raise AssertionError("compiled again instead of reading the cache")

    monkeypatch.setattr(plan, "compile_plan", never)
    assert tp.tpu_plan_table(workdir=str(tmp_path), quick=True, loader_rate=25000.0) == text

    # The step code changes but lowers to the same program: the plan carries over, renamed.
    real = tp.code_fingerprint
    edited = lambda paths=tp.STEP_CODE: "edited" if paths == tp.STEP_CODE else real(paths)  # noqa: E731
    monkeypatch.setattr(tp, "code_fingerprint", edited)
    assert tp.tpu_plan_table(workdir=str(tmp_path), quick=True, loader_rate=25000.0) == text
    assert [p.name.endswith("-edited.json") for p in tmp_path.glob("plan-*.json")] == [True]
    # A config whose program differs finds no plan.
    config = tp.run_config(tp.QUICK_RUNS[0])
    config.model.attention_dropout_rate = 0.2
    with pytest.raises(tp.NotCached):
        tp.cached_plan(config, "v5litepod-1", str(tmp_path), cached_only=True)


@pytest.mark.slow
def test_flash_attention_compiles_into_the_sharded_step():
    # The Pallas kernels inside the scanned layer, per shard of an fsdp=8 batch (shard_map).
    import flax.linen as nn
    import jax

    from zhlm.train import sharding
    from zhlm.train.state import abstract_key

    config = _config("bert:tiny", batch=16, fsdp=8, attention_impl="flash")
    _, trainer, state, batch = plan.build(config, "v5litepod-8")
    with jax.set_mesh(trainer.mesh), nn.logical_axis_rules(sharding.rules(config)):
        compiled = trainer.step_fn.lower(state, batch, abstract_key()).compile()
    hlo = compiled.as_text()
    assert hlo.count("tpu_custom_call") >= 2  # the forward and the backward kernel
    assert compiled.memory_analysis().temp_size_in_bytes < 1e9
