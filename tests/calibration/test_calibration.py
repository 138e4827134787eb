"""Calibration: disjoint fit/held-out designs, executable rounds, a fit that recovers its coefficients."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from radixflow.calibration.design import fit_design, held_out_design
from radixflow.calibration.fit import FIT_TERMS, fit_profile
from radixflow.calibration.timing import TimedBatch, default_clock, round_noise_sigma, to_scheduler_output
from radixflow.costmodel.hardware.profile_files import load_profile, save_profile
from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.costmodel.round_cost.fitted_rates import CostModel, fit_features
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS


def test_held_out_shapes_never_occur_in_the_fit_design():
    fit = fit_design(1024, 16, hybrid=True)
    held = held_out_design(12, 1024, 16, hybrid=True)
    fit_lengths = {c.length for b in fit for c in b.chunks}
    assert all(c.length not in fit_lengths for b in held for c in b.chunks)
    assert all(b.tokens <= 1024 for b in fit + held) and len(held) == 12
    assert all(b.chunks[0].sample for b in held)


def test_design_rounds_are_valid_scheduler_outputs():
    for batch in fit_design(512, 16, hybrid=True)[:6] + held_out_design(4, 512, 16, hybrid=True):
        out = to_scheduler_output(batch, vocab_size=100)
        blocks = [b for c in out.chunks for b in c.block_table]
        assert len(blocks) == len(set(blocks))  # no two chunks share a KV block
        for c, shape in zip(out.chunks, batch.chunks, strict=True):
            assert (c.start, c.end, c.sample) == (shape.start, shape.end, shape.sample)
            assert len(c.block_table) * 16 >= c.end and (c.end == len(c.tokens)) == c.sample
            assert all(c.start < s.position <= c.end for s in c.snapshots)


def test_fit_recovers_a_known_profile_and_scores_held_out_rounds(tmp_path):
    shape = SIM_MODELS["qwen3_5-2b"]
    truth = HardwareProfile(
        "truth", 1e11, None, 0.02, 0.004, kind_scale={"attention": 3.0, "gdn": 2.0}, weight_bytes=4
    )
    model = CostModel(shape, truth)
    batches = [
        TimedBatch(shape.name, b.split, b.chunks, model.round_seconds(b.chunks))
        for b in fit_design(1024, 16, True) + held_out_design(8, 1024, 16, True)
    ]
    fitted = fit_profile("fitted", batches, {shape.name: shape}, 4, "cpu")
    errors = fitted.calibration["errors"]
    assert errors[0]["median_abs_error"] < 1e-3 and errors[0]["held_out_rounds"] == 8
    assert fitted.calibration["unfitted_terms"] == ["conv", "mamba2"]
    save_profile(fitted, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json").round_overhead_s == pytest.approx(fitted.round_overhead_s)


def test_a_fit_on_rounds_of_one_size_is_refused_naming_it():
    """Rounds all of one size cannot tell a call's fixed cost from its per-token costs: the fit
    split the time among its terms at random (a matmul rate of 9e11 FLOP/s, attention 435x as
    costly) and wrote the profile without a word."""
    shape = SIM_MODELS["qwen3_5-2b"]
    truth = HardwareProfile("truth", 1e11, None, 0.02, 0.004, kind_scale={"gdn": 2.0}, weight_bytes=4)
    one = fit_design(1024, 16, True)[5]
    seconds = CostModel(shape, truth).round_seconds(one.chunks)
    batches = [TimedBatch(shape.name, "fit", one.chunks, seconds * (1 + 0.01 * i)) for i in range(5)]
    with pytest.raises(ValueError, match=rf"fit rounds are all {one.tokens} tokens: .* at least two sizes"):
        fit_profile("f", batches, {shape.name: shape}, 4, "cpu")


def test_a_launch_bound_device_whose_matmuls_time_as_free_gets_a_profile():
    """Rounds that barely grow with their size (a small model on a GPU: launches, not arithmetic)
    fit a matmul rate past a profile's 1e18 FLOP/s: calibrate threw every timing away with "the
    timings fit no usable profile". The fitted seconds per FLOP of each term are kept as fitted."""
    shape = SIM_MODELS["qwen3-4b"]
    coef = {"round": 0.01, "matmul": 1e-19, "attention": 1e-14}  # seconds per call and per FLOP
    design = fit_design(2048, 16, False) + held_out_design(4, 2048, 16, False)

    def seconds(chunks):
        features = zip(FIT_TERMS, fit_features(shape, chunks, 2), strict=True)
        return sum(coef.get(t, 0.0) * v for t, v in features)

    batches = [TimedBatch(shape.name, b.split, b.chunks, seconds(b.chunks)) for b in design]
    fitted = fit_profile("gpu", batches, {shape.name: shape}, 2, "cuda")
    assert fitted.calibration["errors"][0]["max_abs_error"] < 1e-6
    assert fitted.seconds_per_flop("matmul") == pytest.approx(1e-19, rel=1e-3)
    assert fitted.seconds_per_flop("attention") == pytest.approx(1e-14, rel=1e-3)
    assert fitted.seconds_per_flop("mamba2") == fitted.seconds_per_flop("matmul")  # unfitted: the matmul rate


def test_fit_tells_attention_over_the_prefix_and_its_gathered_kv_from_the_chunks_own():
    """Rounds priced by a profile whose prefix attention and cached-KV reads have rates of their
    own: the fit recovers each, and prices unseen rounds (a lone long prompt among them)."""
    shape = SIM_MODELS["qwen3-4b"]
    truth = HardwareProfile(
        "truth", 1e11, None, 0.02, 0.004, token_pair_s=2e-8, prefix_kv_s=3e-10,
        kind_scale={"attention": 3.0, "prefix_attention": 1.5}, weight_bytes=4,
    )  # fmt: skip
    model = CostModel(shape, truth)
    design = fit_design(2048, 16, False) + held_out_design(12, 2048, 16, False)
    assert any(len(b.chunks) == 1 and b.chunks[0].length == 1024 for b in design)  # a long prompt
    batches = [TimedBatch(shape.name, b.split, b.chunks, model.round_seconds(b.chunks)) for b in design]
    fitted = fit_profile("fitted", batches, {shape.name: shape}, 4, "cpu")
    assert fitted.kind_scale["prefix_attention"] == pytest.approx(1.5, rel=1e-3)
    assert fitted.kind_scale["attention"] == pytest.approx(3.0, rel=1e-3)
    assert fitted.prefix_kv_s == pytest.approx(3e-10, rel=1e-3)
    assert fitted.calibration["errors"][0]["max_abs_error"] < 1e-6


def test_a_term_no_timed_model_has_is_not_sourced_as_fitted():
    """A profile fitted on a full-attention model prices another model's Mamba2 scan at the
    matmul rate (`calibration.unfitted_terms`); `radixflow cost` said that term was "fitted by
    `radixflow calibrate`" all the same."""
    shape = SIM_MODELS["qwen3-4b"]
    truth = HardwareProfile("truth", 1e11, None, 0.02, 0.004, kind_scale={"attention": 3.0}, weight_bytes=4)
    model = CostModel(shape, truth)
    design = fit_design(2048, 16, False) + held_out_design(4, 2048, 16, False)
    batches = [TimedBatch(shape.name, b.split, b.chunks, model.round_seconds(b.chunks)) for b in design]
    fitted = fit_profile("fitted", batches, {shape.name: shape}, 4, "cpu")
    assert "mamba2" in fitted.calibration["unfitted_terms"]
    hybrid = CostModel(SIM_MODELS["nemotron_h-8b"], fitted).breakdown([ChunkShape(0, 64, True)])
    assert "not timed" in hybrid.terms["mamba2"].source and "fitted by" not in hybrid.terms["mamba2"].source
    assert "fitted by" in hybrid.terms["matmul"].source and "fitted by" in hybrid.terms["attention"].source


def test_timing_a_tiny_model_end_to_end():
    pytest.importorskip("torch")
    from radixflow.calibration.timing import time_batches

    batches = fit_design(64, 16, hybrid=True)[:3]
    timed = time_batches("qwen3_5-tiny", "cpu", batches, repeats=1, threads=1, on_batch=None, clock="wall")
    assert [t.chunks for t in timed] == [b.chunks for b in batches]
    assert all(t.seconds > 0 for t in timed)
    again = time_batches("qwen3_5-tiny", "cpu", batches, 3, 1, None, "wall", kept="median")
    assert all(len(t.repeats) == 3 and t.seconds == sorted(t.repeats)[1] for t in again)
    assert TimedBatch.from_dict(again[0].to_dict()) == again[0]


def test_the_profile_names_the_machine_it_was_measured_on(zoo, monkeypatch):
    """A calibrated profile's every figure is sourced "fitted by radixflow calibrate ... see
    'calibration'", and a profile describes the machine it was timed on, but 'calibration' said
    only "cpu": nothing told a profile of this machine from one of another (experiments/profiles
    keeps several), as the round-profile store's key does."""
    torch = pytest.importorskip("torch")
    from radixflow.calibration import run
    from radixflow.runners.profile_store import RunnerSettings, processor_name

    def timed(model, device, batches, repeats, threads, on_batch, clock, kept, dtype, settings, **runner):
        cost = CostModel(run.model_shape(model), HARDWARE["cpu"])
        settings[model] = RunnerSettings("torch", None)
        return [TimedBatch(model, b.split, b.chunks, cost.round_seconds(b.chunks)) for b in batches]

    monkeypatch.setattr(run, "time_batches", timed)
    profile, _ = run.calibrate(run.CalibrationPlan(("lfm2-tiny",), held_out=2, repeats=1), "p")
    machine = profile.calibration["machine"]
    assert machine["cpu"] == processor_name() and machine["torch"] == torch.__version__
    assert machine["device"] == "cpu" and machine["accelerator"] is None and machine["cpus"] >= 1


def test_calibration_times_the_bare_worker_call_as_the_engine_clock_does(monkeypatch):
    """The engine's clock stops before the runner's predictor learns from the round; a timing
    that also held the predictor's bookkeeping would price every round over the engine's charge."""
    pytest.importorskip("torch")
    from radixflow.calibration import timing
    from radixflow.runners import torch_runner

    built = []
    real = torch_runner.TorchRunner.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        built.append(self.round_predictor)

    monkeypatch.setattr(torch_runner.TorchRunner, "__init__", init)
    timing.time_batches("qwen3_5-tiny", "cpu", fit_design(64, 16, hybrid=True)[:1], 1, 1, None, "wall")
    assert built == [None]


def test_round_noise_is_the_log_spread_of_each_shapes_repeats_less_the_drift_between_passes():
    shape = SIM_MODELS["qwen3_5-2b"]
    shapes = [b.chunks for b in fit_design(256, 16, True)[1:4]]  # rounds of two sizes: a fit's least
    chunks = shapes[0]
    e = 2.718281828459045
    noise = [(0.1, -0.1, 0.0), (-0.1, 0.1, 0.0), (0.0, 0.0, 0.0)]  # each row and column sums to 0
    drift = (0.0, 0.3, -0.2)  # every shape slower in the second pass, faster in the third
    batches = [
        TimedBatch(
            shape.name,
            "fit",
            timed,
            base,
            tuple(base * e ** (n + d) for n, d in zip(row, drift, strict=True)),
        )
        for timed, base, row in zip(shapes, (1.0, 5.0, 0.2), noise, strict=True)
    ]
    once = TimedBatch(shape.name, "held_out", chunks, 2.0, (2.0,))  # timed once: no evidence
    squares = sum(x * x for row in noise for x in row)
    assert round_noise_sigma([*batches, once]) == pytest.approx((squares / 4) ** 0.5)  # (3-1)(3-1) dof
    assert round_noise_sigma([once]) is None and round_noise_sigma(batches[:1]) is None
    fitted = fit_profile("f", [*batches, once], {shape.name: shape}, 4, "cpu")
    assert fitted.calibration["round_noise_sigma"] == pytest.approx(round_noise_sigma(batches))


def test_the_default_clock_is_the_cpu_one_on_any_spelling_of_the_cpu():
    assert default_clock("cpu") == default_clock("cpu:0") == "cpu"
    assert default_clock("cuda") == default_clock("cuda:1") == "wall"


def test_every_spelling_of_one_device_is_one_machine_in_the_profile_store():
    # calibrate --device cpu:1 and a run on cpu time the same processor: one key, so the run finds
    # the profile calibrate stored (the store names a device by its type, and a GPU by its model)
    pytest.importorskip("torch")
    from radixflow.calibration.run import measured_on
    from radixflow.runners.profile_store import RunnerSettings, machine_identity

    settings = RunnerSettings("native", None)
    keys = [machine_identity(d, 1, settings) for d in ("cpu", "cpu:0", "cpu:1")]
    assert keys[0] == keys[1] == keys[2] and keys[0]["device"] == "cpu"
    assert measured_on("cpu:1") == measured_on("cpu")


def test_the_stored_profile_says_which_runs_will_find_it(monkeypatch):
    """The store is keyed by the model, float32 and this machine with calibrate's thread count
    and device, so a run on other threads or in bfloat16 starts from the nominal prior; the
    message said only "stored in PATH", and a user could not tell which runs would use it."""
    import io

    from rich.console import Console

    from radixflow.calibration import command
    from radixflow.calibration.run import CalibrationPlan
    from radixflow.runners import profile_store

    monkeypatch.setattr("radixflow.models.zoo.ensure_model", lambda model: model)
    monkeypatch.setattr(profile_store, "store_key", lambda *a: a)
    monkeypatch.setattr(profile_store, "save_stored", lambda profile, key: "/cache/p.json")
    out = io.StringIO()
    plan = CalibrationPlan(models=("qwen3_5-tiny",), threads=2)
    runners = {"qwen3_5-tiny": {"kernels": "native", "matmul": "single=native,decode=onednn,prefill=mkl"}}
    command._store_own_fits({"qwen3_5-tiny": HARDWARE["cpu"]}, plan, Console(file=out, width=300), runners)
    text = out.getvalue()
    assert "/cache/p.json" in text and "float32" in text and "2 torch threads" in text and "cpu" in text
    # the kernels and matmul routes are the key's too: a run on others starts from the nominal prior
    assert "the native kernels and --matmul single=native,decode=onednn,prefill=mkl" in text


def test_a_profile_the_store_refuses_is_a_warning_line_on_stderr(monkeypatch, capsys):
    # it was "warning: M's round profile not stored" in yellow among the results on stdout: no
    # source named, as the command line's other warnings name it, and not where warnings go
    import io

    from rich.console import Console

    from radixflow.calibration import command
    from radixflow.calibration.run import CalibrationPlan
    from radixflow.runners import profile_store

    def refused(profile, key):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("radixflow.models.zoo.ensure_model", lambda model: model)
    monkeypatch.setattr(profile_store, "store_key", lambda *a: a)
    monkeypatch.setattr(profile_store, "save_stored", refused)
    out = io.StringIO()
    plan = CalibrationPlan(models=("qwen3_5-tiny",))
    runners = {"qwen3_5-tiny": {"kernels": "torch", "matmul": None}}
    command._store_own_fits({"qwen3_5-tiny": HARDWARE["cpu"]}, plan, Console(file=out, width=60), runners)
    said = "radixflow: warning: qwen3_5-tiny's round profile not stored: Permission denied"
    assert (out.getvalue(), capsys.readouterr().err.splitlines()) == ("", [said])


@pytest.mark.parametrize("clock", [[], ["--clock", "cpu"]], ids=["default", "given"])
def test_the_cpu_clock_with_more_threads_is_one_line_naming_both(tmp_path, capsys, clock):
    """The line said "--clock cpu times one thread" without the thread count given, and without
    saying the CPU clock was the default where --clock was not given."""
    pytest.importorskip("torch")
    from radixflow.cli import main

    out = tmp_path / "p.json"
    argv = ["calibrate", "--model", "lfm2-tiny", "--torch-threads", "2", *clock, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: --torch-threads 2 with --clock cpu") and "\n" not in err, err
    assert ("(the default on a CPU)" in err) == (not clock) and not out.exists()


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_the_cpu_clock_on_a_gpu_is_refused_naming_the_wall_clock(device):
    """``--device cuda --clock cpu`` timed each round on the host thread's CPU time, which leaves
    out the GPU's work it waits for (the engine's doors warn of it; timing.py says a GPU needs the
    wall clock), and wrote the figures as the GPU's profile without a word."""
    from types import SimpleNamespace

    from radixflow.calibration import command

    args = SimpleNamespace(repeats=5, held_out=12, max_tokens=2048, clock="cpu", device=device, threads=1)
    refused = rf"^--clock cpu on --device {device}: .*use --clock wall"
    with pytest.raises(command.CalibrationUsageError, match=refused):
        command._plan(args)  # type: ignore[arg-type]


def test_a_ctrl_c_while_timing_says_no_profile_was_written_and_the_old_one_stands(
    tmp_path, capsys, monkeypatch
):
    """A Ctrl-C during minutes of timing said only "radixflow: interrupted": not whether --out
    had been written, half-written or left as it was. It writes nothing until the fit is done, and
    now says so in the line."""
    pytest.importorskip("torch")
    from radixflow.calibration import command
    from radixflow.cli import main

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "calibrate", stopped)
    out = tmp_path / "p.json"
    out.write_text("the previous profile\n")
    assert main(["calibrate", "--model", "lfm2-tiny", "--out", str(out)]) == 130
    said = f"no profile written ({out} is as it was): the same command times every batch again"
    assert capsys.readouterr().err == f"radixflow: interrupted; {said}\n"
    assert out.read_text() == "the previous profile\n"


@pytest.mark.parametrize("via", ["file", "link"])
def test_an_out_that_is_a_file_of_a_model_checkpoint_is_refused_before_timing(
    zoo, tmp_path, capsys, monkeypatch, via
):
    """--out ckpt/config.json (or a link to it) was written over once the timing was done: the
    checkpoint given as --model was destroyed for a profile."""
    pytest.importorskip("torch")
    import shutil

    from radixflow.calibration import command
    from radixflow.calibration.fit import ModelError
    from radixflow.cli import main
    from radixflow.models.zoo import ensure_model

    ckpt = tmp_path / "ckpt"
    shutil.copytree(ensure_model("lfm2-tiny"), ckpt)
    config = (ckpt / "config.json").read_bytes()
    fitted = (HARDWARE["cpu"], [ModelError(str(ckpt), 1, 1, 0.1, 0.1)], {})
    monkeypatch.setattr(command, "_time_and_fit", lambda args, plan: fitted)  # no minutes of timing
    out = ckpt / "config.json"
    if via == "link":
        out = tmp_path / "profile.json"
        out.symlink_to(ckpt / "config.json")
    assert main(["calibrate", "--model", str(ckpt), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"radixflow: error: --out {out}: "), err
    assert f"--model {ckpt}" in err
    assert (ckpt / "config.json").read_bytes() == config


def test_calibrate_help_states_the_range_each_limited_flag_takes():
    # `--max-tokens 64` was refused ("must be from 256 to 65536") by a flag whose help named no range
    import argparse

    from radixflow.calibration.command import LIMITS, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    helps = {a.dest: a.help for a in parser._actions}
    for dest, (low, high) in LIMITS.items():
        assert f"{low} to {high}" in helps[dest], (dest, helps[dest])


def test_calibrate_out_help_names_the_file_the_default_writes():
    # it said "profile-<device>.json": for cuda:0 that reads profile-cuda:0.json, not what is written
    import argparse

    from radixflow.calibration.command import add_arguments, default_out

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (help_text,) = [a.help for a in parser._actions if a.dest == "out"]
    assert default_out("cuda:0") == Path("profile-cuda0.json")
    assert f"{default_out('cuda:0')} for cuda:0" in help_text and "profile-<device>.json" not in help_text


def test_no_round_is_timed_past_the_models_context():
    """llama-tiny and qwen3-tiny take 2048 positions, but calibrate timed and scored held-out rounds
    up to 2304 (768 tokens after 1536 cached): rounds no engine runs on the model."""
    from radixflow.calibration.run import CalibrationPlan, design, total_batches

    plan = CalibrationPlan(("m",))
    shape = replace(SIM_MODELS["qwen3-4b"], max_context=2048)
    batches = design(plan, shape)
    assert all(c.end <= 2048 for b in batches for c in b.chunks)
    assert sum(b.split == "held_out" for b in batches) == plan.held_out
    assert total_batches(plan, {"m": shape}) == len(batches) * plan.repeats  # the progress bar's total
    # a context with room for every shape of the grid times the rounds it always did
    roomy = fit_design(2048, 16, False) + held_out_design(12, 2048, 16, False)
    assert design(plan, SIM_MODELS["qwen3-4b"]) == roomy


def test_a_context_too_short_for_a_held_out_chunk_is_refused_naming_it():
    """A held-out round was drawn until one fitted: with a context under the shortest held-out
    chunk (24 tokens) none ever does, and calibrate never returned."""
    from radixflow.calibration.run import CalibrationPlan, design

    with pytest.raises(ValueError, match=r"context of 20 tokens .* shortest held-out chunk is 24 tokens"):
        design(CalibrationPlan(("m",)), replace(SIM_MODELS["qwen3-4b"], max_context=20))


def test_a_round_budget_too_small_for_a_held_out_chunk_is_refused_naming_it():
    """As a context under the shortest held-out chunk: with ``max_tokens`` under 24 no drawn
    held-out round ever fitted, and `design` (calibrate's API, below the CLI's 256-token floor)
    never returned."""
    import threading

    from radixflow.calibration.run import CalibrationPlan, design

    raised: list[BaseException] = []

    def draw() -> None:
        try:
            design(CalibrationPlan(("m",), max_tokens=20), SIM_MODELS["qwen3-4b"])
        except ValueError as e:
            raised.append(e)

    worker = threading.Thread(target=draw, daemon=True)  # a hang fails the test, not the run
    worker.start()
    worker.join(10)
    assert raised, "design() did not return"
    assert "round budget of 20 tokens" in str(raised[0]) and "24 tokens" in str(raised[0])


def test_round_noise_takes_out_each_models_own_passes():
    """A joint calibration times each model's passes in turn, minutes apart: pass 2 of one model
    and pass 2 of the next share nothing. Taken out as one pass, the drift between the two models'
    passes was counted as per-round noise (σ 0.39 here, against 0.10 of each model alone)."""
    shapes = [b.chunks for b in fit_design(256, 16, True)[1:4]]
    noise = [(0.1, -0.1, 0.0), (-0.1, 0.1, 0.0), (0.0, 0.0, 0.0)]

    def timed(model: str, drift: tuple[float, ...]) -> list[TimedBatch]:
        repeats = [tuple(math.exp(n + d) for n, d in zip(row, drift, strict=True)) for row in noise]
        return [TimedBatch(model, "fit", c, 1.0, r) for c, r in zip(shapes, repeats, strict=True)]

    alone = round_noise_sigma(timed("a", (0.0, 0.3, -0.2)))
    joint = round_noise_sigma(timed("a", (0.0, 0.3, -0.2)) + timed("b", (0.0, -0.4, 0.5)))
    assert alone == pytest.approx((sum(x * x for row in noise for x in row) / 4) ** 0.5)
    assert joint == pytest.approx(alone)


def test_a_context_with_no_room_for_the_grids_prefix_prices_attention_over_one_as_attention():
    """A model of 1000 positions has no fit round after the grid's 1024 cached tokens: attention
    over a cached prefix went unfitted and was charged at the matmul rate, a third of what its
    attention costs here; it is attention, as a profile written before the split prices it."""
    from radixflow.calibration.run import CalibrationPlan, design

    shape = replace(SIM_MODELS["qwen3-4b"], max_context=1000)
    truth = HardwareProfile("truth", 1e11, None, 0.02, 0.004, kind_scale={"attention": 3.0}, weight_bytes=4)
    model = CostModel(shape, truth)
    batches = [
        TimedBatch(shape.name, b.split, b.chunks, model.round_seconds(b.chunks))
        for b in design(CalibrationPlan((shape.name,)), shape)
    ]
    assert all(c.start == 0 for b in batches if b.split == "fit" for c in b.chunks)
    assert any(c.start > 0 for b in batches if b.split == "held_out" for c in b.chunks)
    fitted = fit_profile("fitted", batches, {shape.name: shape}, 4, "cpu")
    assert "prefix_attention" in fitted.calibration["unfitted_terms"]
    assert fitted.seconds_per_flop("prefix_attention") == fitted.seconds_per_flop("attention")
    assert fitted.calibration["errors"][0]["max_abs_error"] < 1e-3
    prefix = CostModel(shape, fitted).breakdown([ChunkShape(512, 64, True)]).terms["prefix_attention"]
    assert "attention rate" in prefix.source and "matmul" not in prefix.source


@pytest.mark.parametrize("second", ["./ck", "link", "ck/"])
def test_one_checkpoint_given_twice_under_two_spellings_is_refused_naming_both(
    tmp_path, capsys, monkeypatch, second
):
    """``--model ck --model ./ck`` timed the checkpoint twice as two models and stored both own
    fits under one key, the second overwriting the first; the same name twice is one model."""
    pytest.importorskip("torch")
    from radixflow.cli import main

    (tmp_path / "ck").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "ck", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "--model", "ck", "--model", second, "--out", "p.json"]) == 2
    err = capsys.readouterr().err.strip()
    same = f"are the same checkpoint ({(tmp_path / 'ck').resolve()}); give it once"
    said = f"radixflow: error: --model: 'ck' and {second!r} {same}"
    assert err == said and not (tmp_path / "p.json").exists()


def _timed(shape, truth, design):
    model = CostModel(shape, truth)
    return [TimedBatch(shape.name, b.split, b.chunks, model.round_seconds(b.chunks)) for b in design]


@pytest.mark.parametrize("split", ["fit", "held_out"])
def test_a_round_timed_at_zero_seconds_is_refused_naming_it(split):
    """A clock that did not advance over a worker call (a coarse CPU clock, a tiny model) timed a
    round at 0 s: the fit divided by it (ZeroDivisionError) after every batch had been timed."""
    shape = SIM_MODELS["qwen3_5-2b"]
    truth = HardwareProfile("truth", 1e11, None, 0.02, 0.004, kind_scale={"gdn": 2.0}, weight_bytes=4)
    batches = _timed(shape, truth, fit_design(1024, 16, True) + held_out_design(4, 1024, 16, True))
    i = next(i for i, b in enumerate(batches) if b.split == split)
    batches[i] = replace(batches[i], seconds=0.0)
    with pytest.raises(ValueError, match=rf"1 of {len(batches)} rounds of {shape.name} timed at 0 s or less"):
        fit_profile("f", batches, {shape.name: shape}, 4, "cpu")


def test_calibrate_on_rounds_timed_at_zero_is_one_line(zoo, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from radixflow.calibration import run
    from radixflow.cli import main

    def frozen_clock(model, device, batches, *args, **kwargs):
        return [TimedBatch(model, b.split, b.chunks, 0.0, (0.0,)) for b in batches]

    monkeypatch.setattr(run, "time_batches", frozen_clock)
    out = tmp_path / "p.json"
    argv = ["calibrate", "--model", "lfm2-tiny", "--repeats", "1", "--held-out", "1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("radixflow: error: the timings fit no usable profile: "), err
    assert err.count("\n") == 1 and "timed at 0 s or less" in err and not out.exists()


def test_the_hint_to_use_a_profile_named_as_a_built_in_one_reads_the_file(zoo, tmp_path, capsys, monkeypatch):
    """``--out h100`` wrote the file h100 and said "use it with: ... --hardware h100", which
    prices on the built-in H100 profile, never the file just calibrated."""
    pytest.importorskip("torch")
    import shlex

    from radixflow.calibration import command
    from radixflow.calibration.fit import ModelError
    from radixflow.cli import main
    from radixflow.costmodel.hardware.profile_files import resolve_hardware

    fitted = (replace(HARDWARE["cpu"], name="calibrated"), [ModelError("lfm2-tiny", 1, 1, 0.1, 0.1)], {})
    monkeypatch.setattr(command, "_time_and_fit", lambda *args: fitted)  # no timing
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "--model", "lfm2-tiny", "--out", "h100"]) == 0
    (hint,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("use it with:")]
    hardware = shlex.split(hint)[-1]
    assert resolve_hardware(hardware).name == "calibrated", hint


def test_the_stored_profiles_path_is_printed_whole_on_a_narrow_terminal(monkeypatch):
    """The line was wrapped at the terminal's width, so the store path came out cut in two
    (``...-float3`` / ``2.json``) and could not be pasted."""
    import io

    from rich.console import Console

    from radixflow.calibration import command
    from radixflow.calibration.run import CalibrationPlan
    from radixflow.runners import profile_store

    path = "/cache/round_profiles/5bcf8df7015c14d3/qwen3_5-tiny-155a6c6708c5-float32.json"
    monkeypatch.setattr("radixflow.models.zoo.ensure_model", lambda model: model)
    monkeypatch.setattr(profile_store, "store_key", lambda *a: a)
    monkeypatch.setattr(profile_store, "save_stored", lambda profile, key: path)
    out = io.StringIO()
    plan = CalibrationPlan(models=("qwen3_5-tiny",))
    runners = {"qwen3_5-tiny": {"kernels": "torch", "matmul": None}}
    command._store_own_fits({"qwen3_5-tiny": HARDWARE["cpu"]}, plan, Console(file=out, width=60), runners)
    assert path in out.getvalue()


def test_the_speed_probe_is_the_geometric_mean_of_each_shapes_median_ratio():
    from radixflow.calibration.speed_probe import SpeedProbe

    probe = SpeedProbe(None, [0, 1], None, reference=[[1.0, 2.0], [1.0, 2.0]], current=[[2.0, 8.0]])
    assert probe.speed() == pytest.approx(math.sqrt(2.0 * 4.0))


@pytest.mark.parametrize("zero", ["reference", "current"])
def test_a_probe_shape_timed_at_zero_is_left_out_not_a_crash(zero):
    """A clock that did not advance over a probe round (a coarse clock, a round all but free)
    divided by zero, or took the log of 0, ending the benchmark after its runs: such a shape says
    nothing of the speed, as a round timed at 0 s says nothing to calibrate's fit."""
    from radixflow.calibration.speed_probe import SpeedProbe

    times = {"reference": [[1.0, 2.0]], "current": [[3.0, 6.0]]}
    times[zero] = [[0.0, times[zero][0][1]]]
    probe = SpeedProbe(None, [0, 1], None, **times)
    assert probe.speed() == pytest.approx(3.0)
    times[zero] = [[0.0, 0.0]]
    assert SpeedProbe(None, [0, 1], None, **times).speed() is None


def test_rounds_timed_alike_whatever_their_size_are_warned_of(zoo, tmp_path, capsys, monkeypatch):
    """Rounds of 16 and of 2048 tokens all timed at 10 ms (a clock that missed the work): the fit
    priced a token at all but nothing (a matmul rate of 1e18 FLOP/s), its held-out error was 0%,
    and calibrate said the profile was "within the 15% target" without a word of it."""
    pytest.importorskip("torch")
    from radixflow.calibration import run
    from radixflow.cli import main

    def flat_clock(model, device, batches, *args, **kwargs):
        return [TimedBatch(model, b.split, b.chunks, 0.01, (0.01,)) for b in batches]

    monkeypatch.setattr(run, "time_batches", flat_clock)
    monkeypatch.setattr("radixflow.calibration.command._store_own_fits", lambda *args: None)
    out = tmp_path / "p.json"
    argv = ["calibrate", "--model", "lfm2-tiny", "--repeats", "1", "--held-out", "1", "--out", str(out)]
    assert main(argv) == 0 and out.exists()
    err = capsys.readouterr().err
    assert "radixflow: warning: lfm2-tiny: the fitted profile prices a round of " in err, err
    assert "did not grow with their size" in err, err


def test_rounds_that_grow_with_their_size_are_not_warned_of():
    from radixflow.calibration.fit import flat_fits

    shape = SIM_MODELS["qwen3_5-2b"]
    truth = HardwareProfile("truth", 1e11, None, 0.02, 0.004, kind_scale={"gdn": 2.0}, weight_bytes=4)
    batches = _timed(shape, truth, fit_design(1024, 16, True) + held_out_design(4, 1024, 16, True))
    fitted = fit_profile("f", batches, {shape.name: shape}, 4, "cpu")
    assert flat_fits(fitted, batches, {shape.name: shape}) == []
