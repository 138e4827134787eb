"""bench/twin_runs.py: the sim twin's figures of a cell."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from radixflow.bench import twin_runs
from radixflow.bench.metrics import summarize
from radixflow.options import EngineOptions, plan_engine
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec

PROFILE = Path(__file__).parents[2] / "experiments" / "profiles" / "cpu.json"


def _cell(arrival: str = "batch") -> tuple[WorkloadSpec, object]:
    """A small grouped cell of qwen3_5-2b, and its sim's scheduler config."""
    plan = plan_engine(EngineOptions(runner="sim", model="qwen3_5-2b", hardware=str(PROFILE)))
    rate = {"rate": 1.0} if arrival == "poisson" else {}
    spec = WorkloadSpec(
        groups=2, candidates=2, context_len=32, candidate_len=4, order="grouped", arrival=arrival,
        vocab_size=plan.choice.vocab_size, seed=0, **rate,
    )  # fmt: skip
    return spec, plan.scheduler_config([len(r.prompt) for r in build_workload(spec).requests])


def test_a_twin_that_completes_nothing_has_no_latency_figures():
    # one block holds no prompt: every request fails, and the mean of the runs' None means raised
    spec, s = _cell("poisson")
    twin = twin_runs.Twin(PROFILE, sigma=0.1, draws=2, speed=1.5)
    figures = twin_runs.sim_figures("qwen3_5-2b", spec, replace(s, num_blocks=1), twin, count=2)
    for policy in twin_runs.POLICIES:
        f = figures[policy]
        assert (f["mean_latency_s"], f["p99_latency_s"], f["at_speed"]["mean_latency_s"]) == (None,) * 3
        assert f["noisy"]["mean_latency_s"] is None and f["noisy"]["median_of_repeats"] is None
        assert f["sequences"] == 2 and f["rounds"] >= 0


def _real(sim, requests, policy: str) -> twin_runs.Trials:
    """One real run of ``policy`` (here the sim itself), taped as a real runner's is."""
    engine, tape = twin_runs.run_one(sim, policy, requests, taped=True)
    return twin_runs.Trials([summarize(policy, engine, sim.scheduler)], [0.0], [tape])


def test_a_run_that_ran_no_round_is_reproduced_by_a_replay_that_runs_none():
    # every request refused (one block holds no prompt): the real run and its replay both ran no
    # round and completed nothing, the same schedule, yet the replay counted as not reproduced
    # (0/1), its mean None against the real run's None
    spec, s = _cell()
    for blocks in (1, s.num_blocks):
        sim, requests = twin_runs.twin_setup("qwen3_5-2b", spec, replace(s, num_blocks=blocks), PROFILE)
        figures = twin_runs.against_real(sim, "native", [requests], _real(sim, requests, "native"))
        assert (figures["replays_reproduced"], figures["replays"]) == (1, 1)


def test_a_median_count_is_a_count_one_run_had():
    # round() of an even count's x.5 median went to the even neighbour: 4.5 → 4 but 5.5 → 6
    assert twin_runs.count_median([4, 5]) == 4 and twin_runs.count_median([5, 6]) == 5
    assert twin_runs.count_median([3, 9, 4]) == 4 and twin_runs.count_median([7]) == 7
