"""benchmarks/policies_torch.py and its parts (`bench.policy_cells`, `bench.twin_runs`,
`bench.policy_tables`): its figures per policy (medians, spread, exactness over every repeat), the
comparisons it derives, and the tables written from a stored run."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from benchmark_utils import load_benchmark

from radixflow.bench import policy_cells, twin_runs
from radixflow.bench.metrics import PolicyResult, summarize
from radixflow.bench.policy_cells import SMOKE_SHAPE, cell_figures, real_figures, resimulated, workload_spec
from radixflow.bench.policy_tables import acceptance, detail_markdown, summary_markdown
from radixflow.bench.round_log import RoundLog
from radixflow.bench.twin import RoundTape
from radixflow.bench.twin_runs import POLICIES, Trials, run_one, sequences, sim_figures, twin_setup
from radixflow.workloads.build import build_workload


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("policies_torch")


def _result(mean: float, agreement: float = 1.0, rounds: int = 3) -> PolicyResult:
    return PolicyResult(
        policy="p", requests=4, completed=4, failed=0, rounds=rounds, rounds_lower_bound=2,
        mean_latency_s=mean, p50_latency_s=mean, p99_latency_s=2 * mean, reuse_rate=0.5, bubble_tokens=0,
        tokens_computed=100, dependency_depth=1, makespan_s=3 * mean, worker_call_s=mean,
        outputs_sha256="abc", agreement=agreement,
    )  # fmt: skip


def test_a_policys_figures_are_the_median_and_spread_of_its_repeats(bench):
    shapes = [
        RoundTape(waves=4, state_copies=6),
        RoundTape(waves=4, state_copies=6),
        RoundTape(waves=5, state_copies=6),
    ]
    trials = Trials([_result(1.0), _result(3.0), _result(2.0, rounds=4)], [0.5, 1.5, 1.0], shapes)
    f = real_figures(trials)
    assert f["mean_latency_s"] == 2.0 and (f["mean_latency_min_s"], f["mean_latency_max_s"]) == (1.0, 3.0)
    assert f["p99_latency_s"] == 4.0 and f["rounds"] == [3, 4] and f["load_1min"] == [0.5, 1.5]
    assert f["waves"] == [4, 5] and f["state_copies"] == [6]
    assert f["identical_to_no_cache"] is True
    one_miss = Trials([_result(1.0), _result(1.0, agreement=0.75)], [0.0, 0.0], [RoundTape()] * 2)
    assert real_figures(one_miss)["identical_to_no_cache"] is False  # any repeat's miss counts


def test_cells_compare_adaptive_with_native_and_the_better_baseline_and_the_sim_with_the_real(bench):
    means = dict(zip(POLICIES, (2.0, 1.6, 1.2), strict=True))
    one = lambda m: Trials([_result(m)], [0.0], [RoundTape()])  # noqa: E731
    real = {p: real_figures(one(m)) for p, m in means.items()}
    sim = {p: {"mean_latency_s": 1.1, "rounds": 3, "waves": 3, "state_copies": 5} for p in POLICIES}
    spec = workload_spec("grouped", SMOKE_SHAPE, 100, None)
    cell = cell_figures("qwen3_5-small", "grouped", spec, real, sim)
    assert cell["adaptive_vs_native"] == pytest.approx(-0.4)
    assert cell["adaptive_vs_best_baseline"] == pytest.approx(-0.25)
    assert cell["policies"]["native"]["sim_vs_real_mean_latency"] == pytest.approx(-0.45)
    assert cell["same_outputs_all_policies"] and not cell["control"] and cell["sim_error"] is None
    no_sim = cell_figures("qwen3-small", "grouped", spec, real, {"error": "model: unknown"})
    assert no_sim["control"] and no_sim["sim_error"] == "model: unknown"
    assert no_sim["policies"]["adaptive"]["sim_vs_real_mean_latency"] is None
    summary = summary_markdown([cell, no_sim])
    assert "| qwen3_5-small | 2.00 / 1.60 / 1.20 | -40.0% | yes |" in summary
    detail = detail_markdown([cell])
    assert "| qwen3_5-small | grouped | adaptive | 3 / 0 / 0 | 1.200 [1.200-1.200] |" in detail
    assert "| 1.100, 3 / 3 / 5 | -8.3% |" in detail


def test_a_stored_run_is_resimulated_on_another_profile_with_its_real_figures_kept(bench, tmp_path):
    one = lambda m: Trials([_result(m)], [0.0], [RoundTape()])  # noqa: E731
    real = {p: real_figures(one(1.0)) for p in POLICIES}
    spec = workload_spec("grouped", SMOKE_SHAPE, 100, None)
    stale = {p: {"mean_latency_s": 9.0, "rounds": 1, "waves": 1, "state_copies": 0} for p in POLICIES}
    cell = cell_figures("qwen3_5-tiny", "grouped", spec, real, stale)
    report = {"config": {"workload": SMOKE_SHAPE, "profile": "old.json"}, "cells": [cell]}
    fresh = resimulated(report, bench.PROFILE)
    again = fresh["cells"][0]["policies"]
    assert fresh["config"]["profile"] == str(bench.PROFILE)
    for p in POLICIES:
        assert again[p]["mean_latency_s"] == 1.0  # the real figure, untouched
        assert again[p]["sim"]["mean_latency_s"] not in (None, 9.0)  # the sim's, computed anew
        assert again[p]["sim_vs_real_mean_latency"] == pytest.approx(again[p]["sim"]["mean_latency_s"] - 1.0)
    assert fresh["acceptance"]["sim_compared"] == 3


def test_the_noisy_twins_median_is_compared_with_the_real_median_beside_the_deterministic_twin(bench):
    one = lambda m: Trials([_result(m)], [0.0], [RoundTape()])  # noqa: E731
    real = {p: real_figures(one(1.0)) for p in POLICIES}
    spread = {"median": 1.05, "low": 0.9, "high": 1.3, "count": 40}
    sim = {p: {"mean_latency_s": 1.2, "rounds": 3, "noisy": {"mean_latency_s": spread}} for p in POLICIES}
    spec = workload_spec("poisson", SMOKE_SHAPE, 100, 2.0)
    cell = cell_figures("qwen3_5-small", "poisson", spec, real, sim)
    f = cell["policies"]["native"]
    assert f["sim_vs_real_mean_latency"] == pytest.approx(0.2)
    assert f["twin_vs_real_mean_latency"] == pytest.approx(0.05)
    counted = acceptance([cell])
    assert (counted["sim_within_10pct"], counted["twin_median_within_10pct"]) == (0, 3)
    assert counted["twin_median_compared"] == 3


def test_real_runs_are_priced_by_the_twin_and_replayed_on_it(bench):
    """Runs of a noisy sim stand in for real ones: each replays exactly, and its rounds cost the
    noise's factors over the twin's price."""
    from radixflow.bench.twin import NoisyPrice

    spec = workload_spec("poisson", SMOKE_SHAPE, 100, 1.0)
    probe = twin_setup("qwen3_5-2b", spec, _config(bench), bench.PROFILE)
    sim, requests = probe
    trials = Trials()
    for seed in (1, 2):
        engine, tape = run_one(replace(sim, runner=NoisyPrice(sim.runner, 0.2, seed)), "radixflow", requests)
        trials.results.append(summarize("radixflow", engine, sim.scheduler))
        trials.tapes.append(tape)
    seen = twin_runs.against_real(sim, "radixflow", [requests, requests], trials)
    assert (seen["replays_reproduced"], seen["replays"], seen["replay_diverged_at"]) == (2, 2, [None, None])
    ratio = seen["measured_over_twin_price"]
    assert ratio["count"] == sum(len(t.rounds) for t in trials.tapes) and ratio["low"] < 1 < ratio["high"]
    noisy = twin_runs.noisy_twin(sim, "radixflow", [requests], 0.2, 5)
    assert noisy["draws"] == 5 and noisy["mean_latency_s"]["count"] == 5


def test_a_poisson_cell_runs_other_arrivals_of_the_same_prompts(bench):
    spec = workload_spec("poisson", SMOKE_SHAPE, 100, 2.0)
    requests = build_workload(spec).requests
    runs = sequences(requests, spec, 3)
    described = lambda run: [(r.id, r.prompt, r.arrival_s) for r in run]  # noqa: E731
    assert described(runs[0]) == described(requests)
    for run in runs[1:]:
        assert [(r.id, r.prompt) for r in run] == [(r.id, r.prompt) for r in requests]
        arrivals = [r.arrival_s for r in run]
        assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert len({tuple(r.arrival_s for r in run) for run in runs}) == 3  # three different sequences
    again = sequences(requests, spec, 3)
    assert [[r.arrival_s for r in run] for run in again] == [[r.arrival_s for r in run] for run in runs]
    at_once = workload_spec("grouped", SMOKE_SHAPE, 100, None)
    assert sequences(requests, at_once, 2) == [requests, requests]


def test_a_poisson_cells_figure_is_the_mean_over_its_sequences(bench):
    trials = Trials([_result(1.0), _result(1.0), _result(4.0)], [0.0] * 3, [RoundTape()] * 3)
    assert real_figures(trials)["mean_latency_s"] == 1.0  # repeats of one workload: the median
    pooled = real_figures(trials, pooled=True)
    assert pooled["mean_latency_s"] == 2.0 and pooled["pooled_over_sequences"] is True


def test_each_real_run_is_replayed_on_its_own_arrival_sequence(bench):
    """Two sequences run on a noisy sim stand in for a Poisson cell's real runs: each replays
    exactly on its own arrivals, and not on the other's."""
    from radixflow.bench.twin import NoisyPrice

    spec = workload_spec("poisson", SMOKE_SHAPE, 100, 1.0)
    sim, requests = twin_setup("qwen3_5-2b", spec, _config(bench), bench.PROFILE)
    runs = sequences(requests, spec, 2)
    trials = Trials()
    for k, run in enumerate(runs):
        engine, tape = run_one(replace(sim, runner=NoisyPrice(sim.runner, 0.1, k)), "native", run)
        trials.results.append(summarize("native", engine, sim.scheduler))
        trials.tapes.append(tape)
    assert twin_runs.against_real(sim, "native", runs, trials)["replays_reproduced"] == 2
    assert twin_runs.against_real(sim, "native", [runs[0], runs[0]], trials)["replays_reproduced"] == 1
    noisy = twin_runs.noisy_twin(sim, "native", runs, 0.1, 4, repeats=2)
    assert noisy["sequences"] == 2 and noisy["median_of_repeats"]["count"] == 4
    figures = sim_figures("qwen3_5-2b", spec, _config(bench), bench.PROFILE, count=2)
    alone = [twin_runs.run_twin(sim, "native", run)[0].mean_latency_s for run in runs]
    assert figures["native"]["sequences"] == 2
    assert figures["native"]["mean_latency_s"] == pytest.approx(sum(alone) / 2)


def _config(bench):
    from radixflow.options import EngineOptions, plan_engine

    plan = plan_engine(EngineOptions(runner="sim", model="qwen3_5-2b", hardware=str(bench.PROFILE)))
    spec = workload_spec("poisson", SMOKE_SHAPE, plan.choice.vocab_size, 1.0)
    return plan.scheduler_config([len(r.prompt) for r in build_workload(spec).requests])


def test_rounds_out_of_a_poisson_only_run_are_each_labelled_and_replay(bench, tmp_path, monkeypatch):
    # without the grouped batch first, Poisson's rate came from native runs made before any cell
    # was labelled: their rows had no "repeat" (predictor_replay.py refused line 1) or, after
    # another workload, were counted as that workload's last cell
    pytest.importorskip("torch")
    replay = load_benchmark("predictor_replay")
    rounds, out = tmp_path / "rounds.jsonl", tmp_path / "p.json"
    argv = ["policies_torch.py", "--smoke", "--workloads", "poisson", "--rounds-out", str(rounds)]
    monkeypatch.setattr("sys.argv", [*argv, "--json", str(out)])
    bench.main()
    recorded = replay.read_rounds(rounds)
    cells = {r.cell for r in recorded}
    assert {(w, p) for w, p, _ in cells} >= {("poisson", p) for p in POLICIES}
    assert {w for w, _, _ in cells} == {"poisson"}


@pytest.mark.parametrize("flag", ["--rounds-out", "--tapes-out"])
def test_an_output_that_cannot_be_appended_to_is_one_line_before_any_model_is_built(
    bench, tmp_path, monkeypatch, flag
):
    # --rounds-out was first written inside the first real round's worker call: every round
    # failed as a worker call that raised, and the run ended in a ZeroDivisionError traceback
    def never(*args, **kwargs):
        raise AssertionError("a family ran")

    monkeypatch.setattr(bench, "run_family", never)
    bad = tmp_path / "missing" / "r.jsonl"
    monkeypatch.setattr(
        "sys.argv", ["policies_torch.py", "--smoke", flag, str(bad), "--json", str(tmp_path / "p.json")]
    )
    with pytest.raises(SystemExit, match=f"^policies_torch: {flag} {bad}: cannot write it"):
        bench.main()


def test_the_policies_take_turns_first_repeat_by_repeat(monkeypatch):
    # every repeat ran a, b, c in the same order: the first policy always met the machine's
    # state after the last one's run (an order bias in a paired comparison)
    ran: list[str] = []

    def fake_run(setup, policy, requests, taped=False):
        ran.append(policy)
        return object(), RoundTape()

    monkeypatch.setattr(policy_cells, "run_one", fake_run)
    monkeypatch.setattr(policy_cells, "summarize", lambda policy, *rest: _result(1.0))
    setup = SimpleNamespace(scheduler=None)
    trials = policy_cells.interleaved(setup, [[], [], []], {}, RoundLog(None))  # type: ignore[arg-type]
    n = len(POLICIES)
    assert [ran[r * n] for r in range(3)] == [POLICIES[r % n] for r in range(3)]
    assert all(sorted(ran[r * n : (r + 1) * n]) == sorted(POLICIES) for r in range(3))
    assert all(len(t.results) == 3 for t in trials.values())  # each policy once per repeat
