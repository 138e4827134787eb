"""build_engine: options -> runner, cache and scheduler, refusing what cannot run before allocating."""

from __future__ import annotations

import errno
import mmap

import pytest

from radixflow.options import EngineOptions, build_engine, plan_engine, runner_name
from radixflow.options import machine as machine_module
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request


def test_the_sim_default_engine_has_the_documented_capacities():
    engine = build_engine(EngineOptions())
    assert engine.runner.model.name == "qwen3_5-2b"
    cfg = engine.scheduler.config
    assert (cfg.num_blocks, cfg.num_state_slots, cfg.token_budget, cfg.max_requests) == (
        32768,
        1024,
        2048,
        32,
    )
    assert engine.cache.usage().total_slots == 1024


def test_a_full_attention_model_gets_no_state_slots_even_when_asked():
    engine = build_engine(EngineOptions(model="qwen3-4b", state_slots=512))
    assert engine.scheduler.config.num_state_slots == 0 and engine.cache.usage().total_slots == 0
    engine.run([Request("a", tuple(range(1, 40))), Request("b", tuple(range(1, 30)))])
    assert all(r.output for r in engine.requests)


def test_given_capacities_win_over_the_runners_defaults():
    engine = build_engine(EngineOptions(kv_blocks=7, state_slots=3, block_size=8, token_budget=64))
    cfg = engine.scheduler.config
    assert (cfg.num_blocks, cfg.num_state_slots, cfg.block_size, cfg.token_budget) == (7, 3, 8, 64)


def test_the_runner_is_guessed_from_the_model_name():
    assert runner_name(EngineOptions()) == "sim"
    assert runner_name(EngineOptions(model="falcon_h1-1.5b")) == "sim"
    assert runner_name(EngineOptions(model="qwen3_5-tiny")) == "torch"
    assert runner_name(EngineOptions(model="qwen3_5-tiny", runner="sim")) == "sim"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (EngineOptions(model="gpt-9"), "unknown torch model 'gpt-9' (zoo names: "),
        (EngineOptions(model="gpt-9", runner="sim"), "unknown sim model 'gpt-9' (sim shapes: "),
        (EngineOptions(hardware="nowhere.json"), "cannot read hardware profile nowhere.json"),
    ],
)
def test_unknown_models_and_profiles_are_problems_before_anything_is_built(options, words):
    with pytest.raises(ProblemError) as info:
        plan_engine(options)
    assert words in info.value.problem.message
    assert info.value.problem.param in ("model", "hardware")


def test_a_guessed_torch_name_lists_the_sim_shapes_too():
    with pytest.raises(ProblemError, match="sim shapes: qwen3_5-2b"):
        plan_engine(EngineOptions(model="gpt-9"))


def test_sim_overrides_reach_the_cost_profile():
    plan = plan_engine(EngineOptions(fixed_cost_ms=3.0, tflops=500.0, per_request_ms=0.5))
    hw = plan.choice.hardware  # type: ignore[attr-defined]
    assert hw.round_overhead_s == pytest.approx(3e-3) and hw.layer_overhead_s == 0.0
    assert hw.flops == pytest.approx(5e14) and hw.per_request_s == pytest.approx(5e-4)
    assert plan.choice.fixed_cost_ms == pytest.approx(3.0)


def test_the_decode_request_and_scheduler_overrides_reach_the_cost_profile_and_the_runner():
    default = plan_engine(EngineOptions(hardware="h200")).choice.hardware  # type: ignore[attr-defined]
    assert (default.decode_overhead_s, default.request_overhead_s, default.scheduler_overlap) == (
        pytest.approx(0.4e-3),
        pytest.approx(2e-3),
        True,
    )
    options = EngineOptions(
        hardware="h200", decode_fixed_cost_ms=1.5, request_overhead_ms=7.0, scheduler_time="serial"
    )
    plan = plan_engine(options)
    hw = plan.choice.hardware  # type: ignore[attr-defined]
    assert hw.decode_overhead_s == pytest.approx(1.5e-3) and hw.request_overhead_s == pytest.approx(7e-3)
    assert hw.scheduler_overlap is False and hw.round_overhead_s == pytest.approx(3e-3)
    assert plan.choice.fixed_cost_ms == pytest.approx(3.0)  # the fixed cost of a call with prefill
    assert plan.build().runner.model.request_overhead_s == pytest.approx(7e-3)


def test_torch_pools_that_memory_cannot_hold_are_refused_before_allocation(zoo, monkeypatch):
    monkeypatch.setattr(machine_module, "available_memory", lambda: 50_000_000)
    plan = plan_engine(EngineOptions(model="qwen3_5-tiny", kv_blocks=100_000))
    with pytest.raises(ProblemError) as info:
        plan.build()
    assert info.value.problem.param == "kv_blocks" and "memory is available" in info.value.problem.message


@pytest.mark.parametrize("device", ["cpu", "cpu:0"])
def test_torch_pools_are_weighed_in_the_runners_dtype(zoo, monkeypatch, device):
    # KV is kept in the runner's dtype (bfloat16: half float32's bytes), state in float32
    f32 = plan_engine(EngineOptions(model="qwen3_5-tiny", kv_blocks=100_000, state_slots=0, device=device))
    f32_need = f32.choice.footprint.pool_bytes(16, 100_000, 0)  # type: ignore[attr-defined]
    monkeypatch.setattr(machine_module, "available_memory", lambda: int(0.75 * f32_need / 0.9))
    with pytest.raises(ProblemError) as info:
        f32.build()
    assert info.value.problem.param == "kv_blocks"
    bf16 = f32.options.replace(dtype="bfloat16")
    assert plan_engine(bf16).choice.memory_problem(plan_engine(bf16).scheduler_config()) is None


def test_torch_capacity_is_sized_to_the_workload_when_there_is_one(zoo):
    plan = plan_engine(EngineOptions(model="qwen3_5-tiny"))
    assert plan.scheduler_config().num_blocks == 1024  # an open-ended stream (a server)
    assert plan.scheduler_config([199] * 100).num_blocks == 100 * (13 + 1)
    assert plan.scheduler_config([199]).num_blocks == 64  # never below 64


def test_a_dtype_the_device_cannot_run_is_a_problem_on_dtype_before_any_model_is_built(zoo):
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(model="qwen3_5-tiny", dtype="float16"))
    assert info.value.problem.param == "dtype" and "float16 runs on cuda only" in info.value.problem.message
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(model="qwen3_5-tiny", dtype="fp8"))
    assert info.value.problem.param == "dtype"


def test_the_dtype_reaches_the_torch_runner(zoo):
    import torch

    engine = plan_engine(EngineOptions(model="llama-tiny", dtype="bfloat16")).build()
    assert engine.runner.dtype == torch.bfloat16
    assert engine.runner.matmul is None  # the CPU GEMM plan routes float32 weights only
    assert plan_engine(EngineOptions(model="llama-tiny")).build().runner.dtype == torch.float32


def test_the_kernels_option_reaches_the_torch_runner(zoo):
    from radixflow.models.kernels.backend import CHOICES
    from radixflow.options.model_options import KERNELS

    assert KERNELS == CHOICES  # the option's values are the backends' names (options import no torch)
    eager = plan_engine(EngineOptions(model="llama-tiny", kernels="torch")).build()
    assert eager.runner.kernels.name == "torch"
    # auto: native on a CPU in float32 where the compiler builds it (else torch, one log line)
    auto = plan_engine(EngineOptions(model="llama-tiny")).build()
    assert auto.runner.kernels.name in ("native", "torch")
    with pytest.raises(ProblemError) as info:
        plan_engine(EngineOptions(model="llama-tiny", dtype="bfloat16", kernels="native")).build()
    assert info.value.problem.param == "kernels" and "CPU in float32" in info.value.problem.message


def test_a_checkpoint_under_home_is_a_model_on_either_runner(tmp_path, monkeypatch):
    # the zoo loader and the sim expand "~"; the torch runner's up-front name check did not, so
    # LLM("~/ck") or model = "~/ck" in a TOML cell was "unknown torch model '~/ck'"
    from radixflow.options.runners import name_problem

    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # it would move the cache past HOME
    monkeypatch.setenv("HOME", str(tmp_path))
    for runner in ("sim", "torch"):
        assert name_problem(EngineOptions(model="~/ck", runner=runner)) is None, runner


def test_no_memory_for_a_pool_mapping_is_one_line_naming_kv_blocks(zoo, monkeypatch):
    """The pools' huge-page mapping refused for want of memory (mmap's ENOMEM) is the engine's
    out-of-memory problem, not an OSError blamed on the model."""

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_room)
    with pytest.raises(ProblemError) as refused:
        plan_engine(EngineOptions(model="nemotron_h-tiny", kv_blocks=16384, block_size=16)).build()
    assert refused.value.problem.param == "kv_blocks" and "lower kv_blocks" in str(refused.value)


@pytest.mark.parametrize("link", [False, True])
def test_a_trace_out_that_is_the_hardware_profile_is_refused_and_the_profile_kept(tmp_path, link):
    # `--trace-out p.json --hardware p.json` was refused ("the same file as --hardware"), and so was
    # a TOML cell's; LLM(model, hardware="p.json", trace_out="p.json") wrote the trace over the profile
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    profile = tmp_path / "p.json"
    save_profile(HARDWARE["h200"], profile)
    before = profile.read_bytes()
    trace = tmp_path / "t.json"
    if link:
        trace.symlink_to(profile)
    given = str(trace if link else profile)
    options = EngineOptions(model="qwen3_5-2b", hardware=str(profile), trace_out=given)
    with pytest.raises(ProblemError) as info:
        engine = build_engine(options)
        engine.run([Request("r", tuple(range(32)))])
        engine.flush_events()
    assert str(info.value) == f"trace_out: {given}: the same file as hardware"
    assert profile.read_bytes() == before


@pytest.mark.parametrize("runner", ["sim", "torch"])
@pytest.mark.parametrize("name", ["config.json", "trace.json"])
def test_a_trace_out_in_the_models_directory_is_refused_and_the_model_kept(zoo, tmp_path, runner, name):
    # `--trace-out ck/config.json` with `--model ck` (LLM("ck", trace_out=...), a TOML cell) wrote
    # the trace over the checkpoint's config: the model loaded no more ("model_type: missing")
    import shutil

    from radixflow.models.zoo import ensure_model

    if runner == "torch":
        pytest.importorskip("torch")
    ck = tmp_path / "ck"
    shutil.copytree(ensure_model("qwen3_5-tiny"), ck)
    before = {p.name: p.read_bytes() for p in ck.iterdir()}
    options = EngineOptions(runner=runner, model=str(ck), trace_out=str(ck / name))
    with pytest.raises(ProblemError) as info:
        engine = build_engine(options)
        engine.run([Request("r", tuple(range(1, 32)))])
        engine.flush_events()
    assert info.value.problem.param == "trace_out"
    why = f"inside the model's directory {ck}: write the trace elsewhere"
    assert str(info.value) == f"trace_out: {ck / name}: {why}"
    assert {p.name: p.read_bytes() for p in ck.iterdir()} == before


def test_a_gpu_out_of_memory_building_the_pools_is_one_line_naming_kv_blocks(zoo, monkeypatch):
    """A GPU's memory is not read before the pools are allocated (`pools_problem` reads a CPU's):
    torch's OutOfMemoryError (a RuntimeError, not a MemoryError) was a traceback at every door."""
    import torch

    import radixflow.runners.torch_runner as torch_runner

    def no_room(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(torch_runner, "KVPool", no_room)
    with pytest.raises(ProblemError) as refused:
        plan_engine(EngineOptions(model="qwen3_5-tiny", kv_blocks=4096)).build()
    assert refused.value.problem.param == "kv_blocks" and "lower kv_blocks" in str(refused.value)


def test_no_memory_for_pools_sized_by_a_budget_names_the_budget(zoo, monkeypatch):
    """With ``cache_memory`` the pools are the budget's caps: "lower kv_blocks or state_slots" named
    two options the user never gave, where the check before allocation names the budget."""

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(mmap, "mmap", no_room)
    with pytest.raises(ProblemError) as refused:
        plan_engine(EngineOptions(model="nemotron_h-tiny", cache_memory="256MiB")).build()
    assert refused.value.problem.param == "cache_memory", refused.value
    assert "lower cache_memory, or cap kv_blocks and state_slots" in str(refused.value)
