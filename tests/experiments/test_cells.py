"""One cell's figures per variant (`experiments.cells`), apart from running whole experiments."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from radixflow.bench.harness import run_policies
from radixflow.bench.pressure import WorkingSet
from radixflow.bench.twin import NoisyPrice
from radixflow.experiments.cells import _Pressure, _variant_result
from radixflow.experiments.config import Variant
from radixflow.options import EngineOptions, plan_engine
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


class _Slowing:
    """Engines whose runner is slower each time one is made (1x, 2x, 3x ... its price), as a real
    runner's repeated trials differ; ``speeds`` fixes the order instead."""

    def __init__(self, setup, speeds: list[float]) -> None:
        self.setup, self.speeds = setup, list(speeds)
        self.runner, self.scheduler = setup.runner, setup.scheduler

    def engine(self, policy=None, placement=None, round_history=None, label=None):
        slower = NoisyPrice(self.setup.runner, 0.0, 0, self.speeds.pop(0))
        return replace(self.setup, runner=slower).engine(policy, placement, label=label)


def _sim():
    plan = plan_engine(EngineOptions(runner="sim", model="qwen3_5-2b", hardware="h100", token_budget=256))
    spec = WorkloadSpec(groups=4, candidates=4, context_len=128, candidate_len=16)
    requests = build_workload(replace(spec, vocab_size=plan.choice.vocab_size)).requests
    return plan.build([len(r.prompt) for r in requests]), requests


def test_a_repeated_cells_goodput_latencies_and_pressure_figures_are_over_every_trial():
    # goodput counted the first trial's requests within the SLO over the median trial's makespan,
    # and the latency list and pressure figures were the first trial's, beside medians of the rest
    setup, requests = _sim()
    variant, pressure = Variant("adaptive", None), _Pressure(WorkingSet(1, 0, 0, 1, 1), None)
    speeds = [1.0, 2.0, 3.0]
    alone = [run_policies(requests, _Slowing(setup, [s]), ["adaptive"], None)[0] for s in speeds]
    slo_ms = 1e3 * max(r.latency_s for r in alone[0].requests)  # the fastest trial all within
    singles = [_variant_result(variant, run, slo_ms, None, pressure) for run in alone]
    (repeated,) = run_policies(requests, _Slowing(setup, speeds), ["adaptive"], None, repeats=3)
    result = _variant_result(variant, repeated, slo_ms, None, pressure)
    goodputs = [s["goodput_rps"] for s in singles]
    assert goodputs[0] > goodputs[1] > goodputs[2] > 0  # slower trials: fewer within, longer makespans
    assert result["goodput_rps"] == pytest.approx(statistics.median(goodputs))
    assert result["latencies_s"] == sorted(x for s in singles for x in s["latencies_s"])
    for key in ("ttft_p95_ms", "ttft_p50_ms", "mean_latency_ms"):
        expected = statistics.median(s["pressure"][key] for s in singles)
        assert result["pressure"][key] == pytest.approx(expected), key
    assert result["mean_latency_s"] == pytest.approx(statistics.median(s["mean_latency_s"] for s in singles))
