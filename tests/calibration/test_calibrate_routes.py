"""`radixflow calibrate --kernels/--matmul`: the decode kernels and matmul routes the rounds are
timed on, as `bench` and `serve` take them (the profile stored is keyed by them)."""

from __future__ import annotations

import pytest

from radixflow.calibration.design import fit_design
from radixflow.calibration.timing import TimedBatch
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.round_cost.fitted_rates import CostModel


def test_calibrate_times_the_kernels_and_matmul_routes_it_is_given(zoo, tmp_path, monkeypatch):
    """calibrate took no --kernels or --matmul: it timed the default ones only, so a run on
    others (`serve --kernels torch`) never found a stored profile of its own and started from the
    nominal prior. Now calibrate takes both, as every torch runner's command does."""
    pytest.importorskip("torch")
    from radixflow.calibration import run
    from radixflow.cli import main
    from radixflow.runners.profile_store import RunnerSettings

    asked: dict[str, str] = {}

    def timed(model, device, batches, *args, kernels="auto", matmul="auto", **kwargs):
        asked.update(kernels=kernels, matmul=matmul)
        args[-1][model] = RunnerSettings(kernels, matmul)  # settings: what the runner resolved
        cost = CostModel(run.model_shape(model), HARDWARE["cpu"])
        return [TimedBatch(model, b.split, b.chunks, cost.round_seconds(b.chunks)) for b in batches]

    monkeypatch.setattr(run, "time_batches", timed)
    argv = ["calibrate", "lfm2-tiny", "--repeats", "1", "--held-out", "2", "--out", str(tmp_path / "p.json")]
    assert main([*argv, "--kernels", "torch", "--matmul", "mkl"]) == 0
    assert asked == {"kernels": "torch", "matmul": "mkl"}


def test_the_runner_timed_resolves_the_kernels_given():
    pytest.importorskip("torch")
    from radixflow.calibration.timing import time_batches

    settings = {}
    batches = fit_design(64, 16, hybrid=True)[:1]
    time_batches("qwen3_5-tiny", "cpu", batches, 1, 1, None, "wall", settings=settings, kernels="torch")
    assert settings["qwen3_5-tiny"].kernels == "torch"
