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


class _FailingFirstRound:
    """The sim runner, but its first worker call fails (its round rolled back, its requests
    failed), as a real runner's out-of-memory round does in one trial and not another."""

    def __init__(self, runner) -> None:
        self.inner, self.name, self.model, self.calls = runner, runner.name, runner.model, 0
        self.round_predictor = getattr(runner, "round_predictor", None)

    def validate(self, request):
        return self.inner.validate(request)

    def reference_tokens(self, requests):
        return self.inner.reference_tokens(requests)

    def run(self, batch):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("out of memory")
        return self.inner.run(batch)


class _SecondTrialFails:
    """Engines whose second one (the second trial) runs on `_FailingFirstRound`."""

    def __init__(self, setup) -> None:
        self.setup, self.made = setup, 0
        self.runner, self.scheduler = setup.runner, setup.scheduler

    def engine(self, policy=None, placement=None, round_history=None, label=None):
        self.made += 1
        runner = _FailingFirstRound(self.setup.runner) if self.made == 2 else self.setup.runner
        return replace(self.setup, runner=runner).engine(policy, placement, label=label)


def test_a_repeated_cells_failures_are_those_of_the_trial_its_failed_count_is():
    # `failed` and `completed` are the trial that failed most's, but the `failures` listed (what
    # report.md's "Failed requests" reads) were the first trial's: failed 1 beside no failure
    setup, requests = _sim()
    (run,) = run_policies(requests, _SecondTrialFails(setup), ["native"], None, repeats=2)
    result = _variant_result(Variant("native", None), run, None, None)
    assert result["failed"] == len(run.trial_runs()[1].result.failures) > 0
    assert result["completed"] == len(requests) - result["failed"]
    listed = [(r.id, r.error) for r in run.trial_runs()[1].requests if r.error is not None]
    assert [(f["id"], f["reason"]) for f in result["failures"]] == listed
