"""Memory-pressure figures."""

from __future__ import annotations

import pytest

from radixflow.bench.metrics import percentile
from radixflow.bench.pressure import measure_working_set, pressure_figures, unbounded_capacity
from radixflow.options import EngineOptions
from radixflow.scheduler import Request
from radixflow.scheduler.request import RequestStatus
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


def _done(rid: str, ttft_s: float) -> Request:
    r = Request(rid, (1, 2, 3), arrival_s=1.0)
    r.status, r.first_token_s, r.finish_s = RequestStatus.FINISHED, 1.0 + ttft_s, 1.0 + 2 * ttft_s
    return r


def test_ttft_percentiles_follow_the_one_rule_every_latency_percentile_does():
    # p95 took the nearest rank (rounded half to even) where p50 and every other percentile
    # interpolate: over five TTFTs of 1..5 ms it read 5 ms, not 4.8
    ttfts = [0.001, 0.002, 0.003, 0.004, 0.005]
    figures = pressure_figures([_done(str(i), t) for i, t in enumerate(ttfts)], None)
    assert figures["ttft_p95_ms"] == pytest.approx(1e3 * percentile(ttfts, 95))
    assert figures["ttft_p50_ms"] == pytest.approx(1e3 * percentile(ttfts, 50))
    assert figures["ttft_p95_ms"] < 5.0


def test_no_finished_request_gives_undefined_ttft_not_an_error():
    figures = pressure_figures([], None)
    assert figures["ttft_p50_ms"] is None and figures["ttft_p95_ms"] is None and figures["hit_rate"] is None


@pytest.mark.parametrize(
    ("placement", "token_budget", "spec"),
    [
        # align saves at every chunk's end: 17 chunks of a 1088-token prompt
        ("align", 64, {"groups": 2, "candidates": 3, "candidate_len": 64}),
        # lone (adaptive's own) puts a ladder of 5 rungs in each namespace's first prompt
        (None, 2048, {"groups": 8, "candidates": 1, "namespaces": 8, "candidate_len": 16}),
    ],
)
def test_the_unbounded_run_holds_every_checkpoint_the_placement_saves(placement, token_budget, spec):
    # an experiment cell with a capacity measured its working set on a cache of 4 slots a
    # request: these raised "the unbounded run evicted" from deep inside the cell
    reqs = build_workload(WorkloadSpec(**spec, context_len=1024, vocab_size=1000)).requests
    options = EngineOptions(model="qwen3_5-2b", placement=placement, token_budget=token_budget)
    ws = measure_working_set(options, reqs)
    assert ws.checkpoints > len(reqs) and ws.peak_bytes > ws.checkpoints * ws.checkpoint_bytes


def test_the_unbounded_run_has_room_for_a_checkpoint_per_request_of_a_large_workload():
    """Each one-off prompt leaves its tail checkpoint: 70,000 of them (a valid workload) need
    70,000 slots, where the unbounded run was capped at 65,536, evicted, and the cell failed with
    "the unbounded run evicted". Its caps are the most any engine options allow."""
    options = EngineOptions.from_mapping({"model": "qwen3_5-2b", "runner": "sim", "policy": "adaptive"})
    requests = [Request(f"i{k}", (*range(1, 16), k)) for k in range(70_000)]
    kv_blocks, state_slots = unbounded_capacity(options, requests)
    assert state_slots >= len(requests) and kv_blocks >= len(requests)
    # within what the options allow (a ProblemError past it)
    EngineOptions.from_mapping({"kv_blocks": kv_blocks, "state_slots": state_slots})


def test_the_unbounded_run_writes_nothing_to_the_cells_trace(tmp_path, monkeypatch):
    # it was traced as an engine of the cell's (a process named after its policy): a flush while
    # it ran (every few seconds) wrote that measuring run over an older trace, even where the
    # cell's own runs were then refused
    monkeypatch.setattr("radixflow.engine.trace_file.FLUSH_EVERY_S", 0.0)  # a flush every round
    trace = tmp_path / "trace.json"
    trace.write_text("older trace\n")
    spec = WorkloadSpec(groups=2, candidates=3, context_len=64, candidate_len=16)
    options = EngineOptions(model="qwen3_5-2b", trace_out=str(trace))
    measure_working_set(options, build_workload(spec).requests)
    assert trace.read_text() == "older trace\n"
