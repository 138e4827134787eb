"""Run one cell: build its runner and workload, run every variant on identical requests, summarise.

A cell's result is plain JSON (no NaN): figures per variant, the latency of every completed
request (for CDFs), and goodput. Sim cells are deterministic, so a cell gives the same result in
any process (serially or as a Ray task).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from radixflow.bench.fleet import run_fleet
from radixflow.bench.fleet_metrics import fleet_figures, fleet_policy_result
from radixflow.bench.harness import PolicyRun, fresh_copy, medians, run_policies
from radixflow.bench.pressure import (
    WorkingSet,
    dense_flops_per_token,
    measure_working_set,
    pressure_figures,
    under_pressure,
)
from radixflow.cache.eviction import EntryKind
from radixflow.engine.engine import Engine
from radixflow.engine.runner import Runner
from radixflow.experiments.config import ENGINE_KEYS, Cell, Variant
from radixflow.experiments.costcheck import CpuTimedRunner, cost_check
from radixflow.fleet import RouterConfig, make_router
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.options.runners import runner_name
from radixflow.problems import Problem, ProblemError
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.policy import policy_counters
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


@contextmanager
def _threads(options: EngineOptions) -> Iterator[None]:
    """A torch cell runs with its own intra-op thread count (restored afterwards); a sim cell's
    count changes nothing and needs no torch."""
    if options.torch_threads is None or runner_name(options) != "torch":
        yield
        return
    import torch

    before = torch.get_num_threads()
    try:
        yield  # the torch runner sets the cell's count when it is built
    finally:
        torch.set_num_threads(before)


def cell_options(cell: Cell) -> EngineOptions:
    """The cell's engine settings as the one options object every door builds engines from."""
    return EngineOptions.from_mapping({k: cell.settings[k] for k in ENGINE_KEYS})


def cell_requests(cell: Cell, vocab_size: int) -> list[Request]:
    return build_workload(WorkloadSpec(**cell.run_workload(), vocab_size=vocab_size)).requests


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


def _latencies(requests: list[Request]) -> list[float]:
    return [r.latency_s for r in requests if r.status is RequestStatus.FINISHED and r.latency_s is not None]


def _goodput(run: PolicyRun, slo_ms: float | None) -> float | None:
    """Requests of ``run`` completed within ``slo_ms`` (None: every one) per second of its makespan."""
    latencies = _latencies(run.requests)
    within = len(latencies) if slo_ms is None else sum(lat <= slo_ms / 1e3 for lat in latencies)
    makespan = run.result.makespan_s
    return within / makespan if makespan > 0 else None


def _variant_result(
    variant: Variant,
    run: PolicyRun,
    slo_ms: float | None,
    rate: float | None,
    pressure: _Pressure | None = None,
) -> dict[str, Any]:
    """Goodput (and the pressure figures) as the timings are: medians over the trials, each trial's
    SLO count over its own makespan; the latencies of every trial, for a CDF over them all."""
    trials = run.trial_runs()
    latencies = sorted(lat for t in trials for lat in _latencies(t.requests))
    figures = {k: _finite(v) for k, v in run.result.to_dict().items()}
    return {
        **figures,
        "variant": variant.label,
        **medians([{"goodput_rps": _goodput(t, slo_ms)} for t in trials]),
        "offered_rps": rate,
        "latencies_s": [round(x, 9) for x in latencies],
        "policy_counters": run.counters,
        # the trial's whose counts `failed` and `completed` are (`_median_run`: the worst's), not
        # the first trial's requests: a later trial's failures were counted yet never listed
        "failures": [{"id": f.id, "reason": f.reason} for f in run.result.failures],
        **({} if pressure is None else {"pressure": pressure.figures(run)}),
    }


@dataclass(frozen=True)
class _Pressure:
    """A cell under memory pressure: the working set its cache was capped against, and the
    dense FLOPs of one recomputed token (None: the runner does not know its shape)."""

    working_set: WorkingSet
    flops_per_token: float | None

    def figures(self, run: PolicyRun) -> dict[str, Any]:
        """`medians` over the trials: TTFT, latency and hit rate (floats) the median, counts the first's."""
        evicted = {f"evicted_{kind.value}": run.evictions.get(kind.value, 0) for kind in EntryKind}
        timed = medians([pressure_figures(t.requests, self.flops_per_token) for t in run.trial_runs()])
        return timed | evicted | {"working_set_bytes": self.working_set.peak_bytes}


def run_cell(cell: Cell, variants: list[Variant]) -> dict[str, Any]:
    """Every variant on the cell's requests; the first variant is the baseline of the report."""
    options = cell_options(cell)
    with _threads(options):
        return _run_cell(cell, options, variants)


def _run_cell(cell: Cell, options: EngineOptions, variants: list[Variant]) -> dict[str, Any]:
    t0 = time.perf_counter()
    s = cell.settings
    plan = plan_engine(options)
    requests = cell_requests(cell, plan.choice.vocab_size)
    ws = None if s["capacity"] is None else measure_working_set(options, requests)
    if ws is not None:  # the cache capped at the cell's share of the working set
        options = under_pressure(options, ws, s["capacity"], max(len(r.prompt) for r in requests))
        plan = plan_engine(options)
    setup = plan.build([len(r.prompt) for r in requests])
    timed = replace(setup, runner=CpuTimedRunner(setup.runner))  # the same engines, timed
    pressure = None if ws is None else _Pressure(ws, dense_flops_per_token(setup.runner))
    arrival = cell.workload["arrival"]
    rate = None if arrival == "batch" else float(cell.workload["rate"])
    groups = _groups(variants, options)
    results: dict[str, dict[str, Any]] = {}
    ran: list[list[tuple[Variant, PolicyRun]]] = []  # per group, in the order the groups ran
    # a trace's processes are named by policy and placement: where the groups' caches differ too,
    # by their cache policies as well, or two variants of one policy read alike
    caches = {(eviction, admission) for _, eviction, admission in groups}
    with setup.trace_kept():  # a Ctrl-C: the trace down to the round it rolled back
        if s["replicas"] > 1:  # a fleet behind the cell's router
            for v in variants:
                results[v.label] = _fleet_variant(cell, v, requests, _variant_cache(setup, v), rate, pressure)
            groups = {}
        for (placement, eviction, admission), group in groups.items():
            cached = replace(timed, options=timed.options.replace(eviction=eviction, admission=admission))
            engines = cached if len(caches) == 1 else _CacheNamed(cached, f"{eviction}+{admission}")
            policies = [v.policy for v in group]
            runs = run_policies(requests, engines, policies, placement, None, s["repetitions"])
            ran.append(list(zip(group, runs, strict=True)))
            for v, run in zip(group, runs, strict=True):
                results[v.label] = _variant_result(v, run, s["slo_ms"], rate, pressure)
    _flush_trace(setup)  # the cell's trace_out, if it has one: a process per variant run
    if plan.choice.name == "torch" and ran:
        cost_check(ran, results, timed.runner.cpu_s, requests, s, plan.choice)
    return {
        "cell": cell.to_dict(),
        "requests": len(requests),
        "model": setup.runner.model.name,
        "hybrid": setup.runner.model.has_recurrent,
        "runner_settings": plan.choice.describe(setup.runner),
        "fixed_cost_ms": plan.choice.fixed_cost_ms,
        "results": [results[v.label] for v in variants],
        "wall_s": time.perf_counter() - t0,
    }


GroupKey = tuple[str | None, str, str]  # placement (None: each policy its own), eviction, admission


def _groups(variants: list[Variant], options: EngineOptions) -> dict[GroupKey, list[Variant]]:
    """The variants that run together, side by side on one engine setup: those sharing a
    placement (None: each policy its own), an eviction and an admission, in variant order. Pure."""
    groups: dict[GroupKey, list[Variant]] = {}
    for v in variants:
        key = (
            v.placement or options.placement,
            v.eviction or options.eviction,
            v.admission or options.admission,
        )
        groups.setdefault(key, []).append(v)
    return groups


def _flush_trace(setup: EngineSetup) -> None:
    """The cell's trace written; one the disk refuses is the cell's failure, named by its key
    (`ProblemError`), as a trace that cannot be opened is."""
    try:
        setup.flush_trace()
    except OSError as e:
        problem = Problem("trace_out", f"cannot write {setup.options.trace_out}: {e.strerror or e}")
        raise ProblemError(problem) from None


@dataclass(frozen=True)
class _CacheNamed:
    """``setup``'s engines (`radixflow.bench.harness.Engines`), each trace process named with
    the cache policies they run (``cache``) after the policy and placement."""

    setup: EngineSetup
    cache: str

    @property
    def runner(self) -> Runner:
        return self.setup.runner

    @property
    def scheduler(self) -> SchedulerConfig:
        return self.setup.scheduler

    def engine(
        self,
        policy: str | None = None,
        placement: str | None = None,
        round_history: int | None = None,
        label: str | None = None,
    ) -> Engine:
        named = None if label is None else f"{label} · {self.cache}"
        return self.setup.engine(policy, placement, round_history, named)


def _variant_cache(setup: EngineSetup, variant: Variant) -> EngineSetup:
    """The setup with the variant's eviction and admission (None: the cell's)."""
    o = setup.options
    cache = o.replace(eviction=variant.eviction or o.eviction, admission=variant.admission or o.admission)
    return replace(setup, options=cache)


def _fleet_variant(
    cell: Cell,
    variant: Variant,
    requests: list[Request],
    setup: EngineSetup,
    rate: float | None,
    pressure: _Pressure | None,
) -> dict[str, Any]:
    """One variant on ``replicas`` engines behind the cell's router (seeded by the workload seed);
    with a trace, each replica's engine is a process of it; under ``pressure``, its figures over
    every replica (each capped as one engine of the cell is)."""
    s = cell.settings
    replica = itertools.count()

    def engine() -> Engine:
        label = f"{variant.label} · replica {next(replica)}"
        return setup.engine(variant.policy, variant.placement, label=label)

    router = make_router(s["router"], RouterConfig(seed=cell.workload["seed"]))
    run = run_fleet(fresh_copy(requests), engine, s["replicas"], router)
    result = fleet_policy_result(variant.policy, run, setup.scheduler, None)
    engines = [r.engine for r in run.replicas]
    # the fleet's counts are every replica's, as one engine's are its own
    evicted = _summed([e.cache.evictions() for e in engines])
    counters = _summed([policy_counters(e.scheduler.policy) for e in engines])
    rounds = [rd for e in engines for rd in e.rounds]
    policy_run = PolicyRun(result, rounds, run.requests, counters, evicted)
    return {
        **_variant_result(variant, policy_run, s["slo_ms"], rate, pressure),
        "fleet": fleet_figures(run, s["router"]),
    }


def _summed(counts: list[dict[str, int]]) -> dict[str, int]:
    """Each key's count summed over ``counts``. Pure."""
    total: dict[str, int] = {}
    for c in counts:
        for key, n in c.items():
            total[key] = total.get(key, 0) + n
    return total


def without_timing(result: dict[str, Any]) -> dict[str, Any]:
    """The part of a cell result that must not depend on where or when it ran."""
    return {k: v for k, v in result.items() if k != "wall_s"}
