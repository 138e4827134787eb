"""The bench harness: every policy on the same requests, one after another."""

from __future__ import annotations

from dataclasses import replace

from engine_utils import Engines

from radixflow.bench.harness import BenchReport, Trials, run_policies
from radixflow.bench.metrics import Failure
from radixflow.costmodel.hardware.profiles import HARDWARE
from radixflow.costmodel.shape.sim_catalogue import SIM_MODELS
from radixflow.runners.sim import SimRunner
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


class _Referenced(SimRunner):
    """The sim with a no-cache reference, as the torch runner has: each request's first token
    id (what the sim generates is not it, so agreement is 0), every call noted."""

    calls: list[list[str]]

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        self.calls.append([r.id for r in requests])
        return {r.id: r.prompt[0] for r in requests}


def test_the_reference_pass_reports_each_request_before_any_round_runs():
    """A reference pass (a full prefill per request on a real model) is long: it reports each
    request done, so a progress bar can show it rather than stand at 0% before the first round."""
    requests = build_workload(WorkloadSpec(groups=2, candidates=2, context_len=32, candidate_len=4)).requests
    runner = _Referenced(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    runner.calls = []
    events: list[str] = []
    runs = run_policies(
        requests,
        Engines(runner, SchedulerConfig()),
        ["native", "adaptive"],
        None,
        on_round=lambda policy, record, engine: events.append(policy),
        on_reference=lambda: events.append("reference"),
    )
    assert events[: len(requests)] == ["reference"] * len(requests)
    assert "reference" not in events[len(requests) :]
    assert sorted(i for call in runner.calls for i in call) == sorted(r.id for r in requests)
    expected = sum(r.prompt[0] == r.output[0] for r in runs[0].requests) / len(requests)
    assert [run.result.agreement for run in runs] == [expected, expected]


def test_no_reference_reports_nothing():
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    reported: list[int] = []
    engines = Engines(runner, SchedulerConfig())
    [run] = run_policies(requests, engines, ["native"], None, on_reference=lambda: reported.append(1))
    assert reported == [] and run.result.agreement is None


def test_repeats_report_the_worst_trials_agreement_not_the_median():
    """Agreement is exactness, not a timing: one trial of three that disagrees with the no-cache
    reference must show, where a median of the three hid it (1.0)."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    [run] = run_policies(requests, Engines(runner, SchedulerConfig()), ["native"], None)
    trials = Trials(["native"], 3)
    for agreement in (1.0, 0.5, 1.0):
        trials.add("native", replace(run, result=replace(run.result, agreement=agreement)))
    [repeated] = trials.runs()
    assert repeated.result.agreement == 0.5


def test_repeats_report_the_failures_of_the_trial_that_failed_most():
    """A trial that failed requests (a worker call that ran out of memory on its second run) must
    show in the failed row and the exit status, where the first trial's counts hid it."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    [run] = run_policies(requests, Engines(runner, SchedulerConfig()), ["native"], None)
    lost = (Failure("g0c0", "round failed"), Failure("g0c1", "round failed"))
    failed = replace(run.result, completed=0, failed=2, failures=lost, mean_latency_s=None)
    trials = Trials(["native"], 3)
    for result in (run.result, failed, run.result):
        trials.add("native", replace(run, result=result))
    [repeated] = trials.runs()
    assert (repeated.result.completed, repeated.result.failed, repeated.result.failures) == (0, 2, lost)
    assert repeated.result.mean_latency_s == run.result.mean_latency_s  # the trials that have one


def test_repeats_whose_outputs_differ_say_so_with_each_trials_sha():
    """The outputs' digest was the first trial's: a trial whose outputs differed (a
    nondeterministic runner) was hidden. Agreeing trials give their one digest."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    [run] = run_policies(requests, Engines(runner, SchedulerConfig()), ["native"], None)
    sha = run.result.outputs_sha256
    for shas, shown, each in [((sha, sha), sha, None), ((sha, "f" * 64, sha), None, (sha, "f" * 64, sha))]:
        trials = Trials(["native"], len(shas))
        for s in shas:
            trials.add("native", replace(run, result=replace(run.result, outputs_sha256=s)))
        [repeated] = trials.runs()
        assert (repeated.result.outputs_sha256, repeated.result.trial_outputs_sha256) == (shown, each)
        assert repeated.result.to_dict()["trial_outputs_sha256"] == each  # in --json


class _Labelled(Engines):
    """`Engines` that notes the label each engine is asked for (a trace's process name)."""

    def __init__(self, runner: SimRunner, scheduler: SchedulerConfig, labels: list[str]) -> None:
        super().__init__(runner, scheduler)
        object.__setattr__(self, "labels", labels)

    def engine(self, policy=None, placement=None, round_history=None, label=None):
        self.labels.append(label)
        return super().engine(policy, placement, round_history, label)


def test_an_engine_on_a_full_attention_model_is_labelled_with_no_placement():
    """A model without recurrent state places no checkpoint: its trace processes were named after
    the policy's own placement (`native · branch`), where `--json`'s config says none."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    labels: list[str] = []
    for model in ("qwen3-4b", "qwen3_5-2b"):
        runner = SimRunner(SIM_MODELS[model], HARDWARE["h100"])
        run_policies(requests, _Labelled(runner, SchedulerConfig(), labels), ["native", "adaptive"], None)
    assert labels == ["native · none", "adaptive · none", "native · branch", "adaptive · lone"]


def test_repeats_write_every_trials_timings_beside_their_median():
    """``--repeat`` showed the median alone: the JSON had no trace of how far the trials spread,
    so a difference between policies could not be read against it."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    [run] = run_policies(requests, Engines(runner, SchedulerConfig()), ["native"], None)
    trials = Trials(["native"], 3)
    for seconds in (2.0, 1.0, 4.0):
        trials.add("native", replace(run, result=replace(run.result, mean_latency_s=seconds)))
    [result] = BenchReport({}, {}, trials.runs()).to_json()["results"]  # type: ignore[misc]
    assert result["mean_latency_s"] == 2.0
    assert [t["mean_latency_s"] for t in result["trial_timings"]] == [2.0, 1.0, 4.0]
    assert all(isinstance(v, float | None) for t in result["trial_timings"] for v in t.values())
    [alone] = BenchReport({}, {}, [run]).to_json()["results"]  # type: ignore[misc]
    assert alone["trial_timings"] == [{k: alone[k] for k in alone["trial_timings"][0]}]  # one run: its own


def test_a_repeated_timing_is_the_median_of_the_trials_that_have_one_whatever_their_order():
    """A trial that completed nothing has no latency (None): the median took the first trial's
    figure then, so a first trial that failed every request showed "-" where the trials after it
    had latencies, and one later trial that did hid the median behind the first's value."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    [run] = run_policies(requests, Engines(runner, SchedulerConfig()), ["native"], None)
    for latencies, median in [((None, 1.0, 2.0), 1.5), ((1.0, None, 3.0, 4.0), 3.0), ((None, None), None)]:
        trials = Trials(["native"], len(latencies))
        for seconds in latencies:
            trials.add("native", replace(run, result=replace(run.result, mean_latency_s=seconds)))
        [repeated] = trials.runs()
        assert repeated.result.mean_latency_s == median


def test_repeats_run_interleaved_trial_by_trial_so_each_trials_ratio_is_a_pair():
    """(a, b, b, a), never (a, a, b, b): trial t of every policy runs side by side, under one
    load, which the paired ratios under the table (`ratio_lines`) take for granted; and each
    policy first in turn (`rotated`): in (a, b, a, b) whatever the turn before left (a busy
    spell, a grown heap) fell on b alone."""
    requests = build_workload(WorkloadSpec(groups=1, candidates=2, context_len=32, candidate_len=4)).requests
    labels: list[str | None] = []

    class Recording(Engines):
        def engine(self, policy=None, placement=None, round_history=None, label=None):  # type: ignore[override]
            labels.append(label)
            return super().engine(policy, placement, round_history, label)

    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    run_policies(requests, Recording(runner, SchedulerConfig()), ["native", "adaptive"], None, repeats=2)
    assert labels == ["native · branch #1", "adaptive · lone #1", "adaptive · lone #2", "native · branch #2"]
