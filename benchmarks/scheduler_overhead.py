"""Scheduler CPU per round and per run as the queue and the cache grow (sim runner, no torch).

Workload: shared contexts of 64 tokens, each followed by 2 candidates of 16 tokens (half the
requests are consumers, blocked while their producer runs), token budget 2048, 32 requests per
round, block size 16. Per-round figures are taken once the cache is full and every admission
evicts, with the queue topped up so it stays at the target length. Scheduler CPU is
`time.process_time` around `Scheduler.schedule` and `Scheduler.update`. The policies' per-round figures are
taken side by side in one process (their rounds in turn), ``--repeat`` times (3) in fresh
processes; the median is reported beside every run's, with the ratio to `radixflow` (of the
medians, and repeat by repeat: its range and median over the repeats), and the
machine's load average before and after.

    python benchmarks/scheduler_overhead.py --json results/scheduler_overhead.json
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

from radixflow.bench.metrics import percentile
from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, paired_lines, rotated
from radixflow.cli.args import positive_int
from radixflow.engine.engine import Engine
from radixflow.options import EngineOptions, plan_engine
from radixflow.runners.sim import DEFAULT_SIM_MODEL
from radixflow.scheduler import Request

T = TypeVar("T")
POLICIES = ("native", "radixflow", "adaptive")
# the default round budgets, a small cache (the sim runner's default cache for `blocked_round`)
OPTIONS = EngineOptions(
    model=DEFAULT_SIM_MODEL, runner="sim", hardware="h100", kv_blocks=2048, state_slots=256
)


def requests(seed: int, prefix: str = "r") -> Iterator[Request]:
    """An endless stream: a 64-token context, then its 2 candidates of 16 tokens each."""
    rng = random.Random(seed)
    for g in range(10**9):
        ctx = tuple(rng.randrange(32_000) for _ in range(64))
        for k in range(2):
            yield Request(f"{prefix}{g}c{k}", ctx + tuple(rng.randrange(32_000) for _ in range(16)))


class TimedEngine:
    """An engine whose scheduler calls are timed (CPU seconds per round)."""

    def __init__(self, policy: str, options: EngineOptions = OPTIONS) -> None:
        self.engine = plan_engine(options.replace(policy=policy)).build().engine()
        self.per_round: list[float] = []
        sched = self.engine.scheduler
        schedule, update = sched.schedule, sched.update

        def timed_schedule():
            t0 = time.process_time()
            out = schedule()
            self._spent = time.process_time() - t0
            return out

        def timed_update(*args):
            t0 = time.process_time()
            done = update(*args)
            self.per_round.append(self._spent + time.process_time() - t0)
            return done

        sched.schedule, sched.update = timed_schedule, timed_update  # type: ignore[method-assign]

    def full(self) -> bool:
        usage = self.engine.cache.usage()
        return usage.free_blocks < 0.05 * usage.total_blocks and usage.free_slots < 0.05 * usage.total_slots


def per_round(waiting: int, rounds: int) -> dict[str, dict[str, float]]:
    """Scheduler CPU per round of every policy at one queue length, side by side in one process:
    each engine is filled and warmed up, then they take their measured rounds in turn (round r
    of each before round r + 1 of any, each first in turn), so a slow spell of this shared
    machine hits all alike."""
    timed = {policy: TimedEngine(policy) for policy in POLICIES}
    streams = {policy: requests(seed=waiting) for policy in POLICIES}
    warmups = {policy: _fill(timed[policy], streams[policy], waiting) for policy in POLICIES}
    for r in range(rounds):
        for policy in rotated(POLICIES, r):  # each first in turn: no order bias
            timed[policy].engine.step()
            _top_up(timed[policy].engine, streams[policy], waiting)
    out = {}
    for policy, t in timed.items():
        out[policy] = {
            "waiting": waiting,
            **round_figures(t.per_round),
            "warmup_rounds": warmups[policy],
            "cache_full": t.full(),
        }
    return out


def round_figures(per_round_s: list[float]) -> dict[str, float | None]:
    """Median and p99 scheduler CPU per round in ms, interpolated as every percentile of the bench
    (`bench.metrics.percentile`)."""
    ms = [1e3 * x for x in per_round_s]
    return {"median_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99)}


def _fill(timed: TimedEngine, stream: Iterator[Request], waiting: int) -> int:
    """Queue ``waiting`` requests and run rounds until the cache is full; returns those rounds."""
    engine = timed.engine
    for _ in range(waiting):
        engine.submit(next(stream))
    warmup = 0
    while not timed.full() and warmup < 400:
        engine.step()
        warmup += 1
        _top_up(engine, stream, waiting)
    timed.per_round.clear()
    return warmup


def _top_up(engine: Engine, stream: Iterator[Request], waiting: int) -> None:
    missing = waiting - len(engine.scheduler.waiting)
    for _ in range(max(missing, 0)):
        req = next(stream)
        req.arrival_s = engine.now
        engine.submit(req)


def blocked_round(policy: str, consumers: int) -> float:
    """CPU ms of the first round when one producer and ``consumers`` consumers of it all wait."""
    timed = TimedEngine(policy, OPTIONS.replace(kv_blocks=None, state_slots=None))
    rng = random.Random(consumers)
    ctx = tuple(rng.randrange(32_000) for _ in range(64))
    for k in range(consumers + 1):
        timed.engine.submit(Request(f"c{k}", ctx + tuple(rng.randrange(32_000) for _ in range(16))))
    timed.engine.step()
    return 1e3 * timed.per_round[0]


def _whole_run(policy: str, n: int) -> dict[str, float]:
    timed = TimedEngine(policy)
    stream = requests(seed=n)
    t0 = time.perf_counter()
    timed.engine.run(next(stream) for _ in range(n))
    return {
        "requests": n,
        "scheduler_cpu_s": sum(timed.per_round),
        "wall_s": time.perf_counter() - t0,
        "rounds": len(timed.engine.rounds),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def fresh(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` in a fresh process, so its peak RSS and its heap are its own (a whole run's
    peak RSS would otherwise be the largest of every run before it)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(fn, args)


def per_round_repeated(waiting: list[int], rounds: int, repeat: int) -> dict[str, list[dict]]:
    """`per_round` at every queue length, ``repeat`` times, each in a fresh process: the same work
    timed in two processes here differs by up to 1.6x, so medians over processes."""
    runs = {n: [fresh(per_round, n, rounds) for _ in range(repeat)] for n in waiting}
    out: dict[str, list[dict]] = {p: [] for p in POLICIES}
    for policy in POLICIES:
        for rs in runs.values():
            medians = [r[policy]["median_ms"] for r in rs]
            row = {**rs[0][policy], "median_ms": statistics.median(medians), "median_ms_runs": medians}
            row["p99_ms"] = statistics.median(r[policy]["p99_ms"] for r in rs)
            row["cache_full"] = all(r[policy]["cache_full"] for r in rs)
            out[policy].append(row)
    return out


def machine(load_before: float | None) -> dict[str, float | int | None]:
    """The machine's CPUs and 1-minute load average before and now: CPU timings on a shared
    machine read beside the load they were taken under."""
    return {"cpus": os.cpu_count(), "load_1min_before": load_before, "load_1min_after": load_now()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--waiting", type=positive_int, nargs="+", default=[1_000, 10_000, 100_000])
    p.add_argument("--runs", type=positive_int, nargs="+", default=[10_000, 50_000, 100_000])
    p.add_argument("--blocked", type=positive_int, nargs="+", default=[1_000, 10_000, 50_000])
    p.add_argument("--rounds", type=positive_int, default=60, help="measured rounds per queue length")
    p.add_argument(
        "--repeat", type=positive_int, default=3, help="per-round measurements of each, interleaved"
    )
    p.add_argument("--json", type=Path, default=Path("results/scheduler_overhead.json"))
    p.add_argument("--smoke", action="store_true", help="CI: small queues, few rounds, one repeat")
    args = p.parse_args()
    if args.smoke:
        args.waiting, args.runs, args.blocked, args.rounds, args.repeat = [200], [500], [100], 5, 1
    console = Console()
    load_before = load_now()
    config = plan_engine(OPTIONS).scheduler_config()
    result: dict = {"config": config.__dict__, "per_round": {}, "blocked_round_ms": {}, "runs": {}}
    for policy in POLICIES:
        result["runs"][policy] = [fresh(_whole_run, policy, n) for n in args.runs]
        console.print(f"{policy}: whole runs done")
    result["per_round"] = per_round_repeated(args.waiting, args.rounds, args.repeat)
    console.print("per-round figures done")
    for policy in POLICIES:
        blocked_round(policy, 1)  # warm-up: the first round in a process loads the cost model's tables
        result["blocked_round_ms"][policy] = {n: blocked_round(policy, n) for n in args.blocked}
        console.print(f"{policy}: blocked-round figures done")
    result["machine"] = machine(load_before)
    _print(result, console)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_figures(args.json, result)
    console.print(f"wrote {args.json}")


def _print(result: dict, console: Console) -> None:
    m = result["machine"]
    console.print(f"{m['cpus']} CPUs, load average (1 min) {load_text(m['load_1min_before'])} before, "
                  f"{load_text(m['load_1min_after'])} after")  # fmt: skip
    table = Table(title="scheduler CPU per round, cache full and evicting (ms, medians over repeats)")
    for col in ("policy", "waiting", "median", "runs", "p99", "× radixflow", "cache full"):
        table.add_column(col, justify="right")
    base = {r["waiting"]: r["median_ms"] for r in result["per_round"]["radixflow"]}
    for policy, rows in result["per_round"].items():
        for r in rows:
            runs = " ".join(f"{m:.2f}" for m in r.get("median_ms_runs", [r["median_ms"]]))
            ratio = f"{r['median_ms'] / base[r['waiting']]:.2f}"
            cells = f"{r['waiting']:,}", f"{r['median_ms']:.3f}", runs, f"{r['p99_ms']:.3f}", ratio
            table.add_row(policy, *cells, str(r["cache_full"]))
    console.print(table)
    _print_paired(result["per_round"])
    table = Table(title="first round with N blocked consumers (ms)")
    table.add_column("policy")
    for policy, rows in result["blocked_round_ms"].items():
        for n, ms in rows.items():
            table.add_row(policy, f"{n:,}", f"{ms:.1f}")
    console.print(table)
    table = Table(title="whole runs")
    for col in ("policy", "requests", "scheduler CPU (s)", "wall (s)", "rounds", "peak RSS (MB)"):
        table.add_column(col, justify="right")
    for policy, rows in result["runs"].items():
        for r in rows:
            table.add_row(
                policy,
                f"{r['requests']:,}",
                f"{r['scheduler_cpu_s']:.2f}",
                f"{r['wall_s']:.1f}",
                str(r["rounds"]),
                f"{r['peak_rss_mb']:.0f}",
            )
    console.print(table)


def _print_paired(per_round: dict[str, list[dict]]) -> None:
    """Each policy against radixflow, repeat by repeat (their rounds ran in turn in one process):
    the spread the table's ratio of medians is read against."""
    by_waiting: dict[int, dict[str, list[float]]] = {}
    for policy, rows in per_round.items():
        for r in rows:
            by_waiting.setdefault(r["waiting"], {})[policy] = r.get("median_ms_runs", [r["median_ms"]])
    for waiting, runs in by_waiting.items():
        for line in paired_lines(f"waiting {waiting:,}: CPU per round", runs, "radixflow"):
            print(line)


if __name__ == "__main__":
    main()
