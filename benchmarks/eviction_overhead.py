"""Scheduler plus eviction CPU per round under each eviction policy (and admission), full cache.

The workload and timing of `scheduler_overhead.py` (shared contexts of 64 tokens with two
16-token candidates each; `time.process_time` around `Scheduler.schedule` and `update`, where
every eviction happens): each variant's engine is filled until its cache is full and every
admission evicts, then the variants take their measured rounds in turn, so a slow spell of a
shared machine hits all alike. ``--repeat`` fresh processes; medians, and each variant's ratio
to `lru` (of the medians, and repeat by repeat: its range and median over the repeats), beside
the machine's load average before and after.

    python benchmarks/eviction_overhead.py --waiting 10000 --json results/eviction_overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.table import Table

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, paired_lines, rotated
from radixflow.cli.args import positive_int
from radixflow.engine.engine import Engine
from radixflow.problems import ProblemError, flag
from radixflow.scheduler import Request

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, run as a script
from scheduler_overhead import OPTIONS, TimedEngine, fresh, machine, requests

T = TypeVar("T")
# (eviction, admission): the baseline first
VARIANTS = (("lru", "all"), ("cost-per-byte", "all"), ("cost-per-byte", "likely"))


def label(variant: tuple[str, str]) -> str:
    return f"{variant[0]}/{variant[1]}"


def per_round(waiting: int, rounds: int, policy: str, cache_memory: str | None = None) -> dict[str, float]:
    """Median CPU ms per round of every variant at one queue length, interleaved round by round
    (each first in turn);
    ``cache_memory``: one byte budget over KV and checkpoints (None: the two caps alone)."""
    options = OPTIONS if cache_memory is None else OPTIONS.replace(cache_memory=cache_memory)
    timed = {v: TimedEngine(policy, options.replace(eviction=v[0], admission=v[1])) for v in VARIANTS}
    streams = {v: requests(seed=waiting) for v in VARIANTS}
    for v in VARIANTS:
        _fill(timed[v], streams[v], waiting)
    for r in range(rounds):
        for v in rotated(VARIANTS, r):  # each first in turn: no order bias
            timed[v].engine.step()
            _top_up(timed[v].engine, streams[v], waiting)
    return {label(v): statistics.median(1e3 * x for x in timed[v].per_round) for v in VARIANTS}


def repeated(fn: Callable[..., T], args: tuple, repeat: int) -> list[T]:
    """``fn(*args)`` ``repeat`` times, each in a fresh process (`scheduler_overhead.fresh`): one
    pool's worker would run every repeat on the heap the one before it left."""
    return [fresh(fn, *args) for _ in range(repeat)]


def _fill(timed: TimedEngine, stream: Iterator[Request], waiting: int) -> None:
    for _ in range(waiting):
        timed.engine.submit(next(stream))
    for _ in range(400):
        if timed.full():
            break
        timed.engine.step()
        _top_up(timed.engine, stream, waiting)
    timed.per_round.clear()


def _top_up(engine: Engine, stream: Iterator[Request], waiting: int) -> None:
    for _ in range(max(waiting - len(engine.scheduler.waiting), 0)):
        req = next(stream)
        req.arrival_s = engine.now
        engine.submit(req)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--waiting", type=positive_int, nargs="+", default=[10_000])
    p.add_argument("--rounds", type=positive_int, default=40, help="measured rounds per queue length")
    p.add_argument("--repeat", type=positive_int, default=3, help="fresh processes per queue length")
    p.add_argument("--policy", default="adaptive")
    p.add_argument("--json", type=Path, default=Path("results/eviction_overhead.json"))
    p.add_argument("--smoke", action="store_true", help="CI: a small queue, few rounds, one repeat")
    p.add_argument(
        "--cache-memory", help="one byte budget over KV and checkpoints, e.g. 1GiB (default: the caps alone)"
    )
    args = p.parse_args()
    try:
        run_from_args(args)
    except ProblemError as e:  # an unknown model, hardware or policy: one line, as radixflow's own flags
        p.error(e.problem.render(flag))


def run_from_args(args: argparse.Namespace) -> None:
    if args.smoke:
        args.waiting, args.rounds, args.repeat = [200], 5, 1
    load_before = load_now()
    result: dict = {"policy": args.policy, "rounds": args.rounds, "cache_memory": args.cache_memory}
    result["per_round"] = {}
    for waiting in args.waiting:
        runs = repeated(per_round, (waiting, args.rounds, args.policy, args.cache_memory), args.repeat)
        medians = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
        base = medians[label(VARIANTS[0])]
        result["per_round"][waiting] = {
            name: {"median_ms": ms, "runs_ms": [r[name] for r in runs], "vs_lru": ms / base}
            for name, ms in medians.items()
        }
    result["machine"] = machine(load_before)
    _print(result)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_figures(args.json, result)


def _print(result: dict) -> None:
    m = result["machine"]
    before, after = m["load_1min_before"], m["load_1min_after"]
    print(f"{m['cpus']} CPUs, load average (1 min) {load_text(before)} before, {load_text(after)} after")
    table = Table(title=f"scheduler + eviction CPU per round ({result['policy']}), full cache")
    for col in ("waiting", "variant", "median ms", "x lru", "runs ms"):
        table.add_column(col)
    for waiting, rows in result["per_round"].items():
        for name, row in rows.items():
            runs = ", ".join(f"{x:.2f}" for x in row["runs_ms"])
            table.add_row(str(waiting), name, f"{row['median_ms']:.2f}", f"{row['vs_lru']:.2f}", runs)
    Console().print(table)
    for waiting, rows in result["per_round"].items():  # the ratios of medians above: their spread
        runs = {name: row["runs_ms"] for name, row in rows.items()}
        for line in paired_lines(f"waiting {waiting}: CPU per round", runs, label(VARIANTS[0])):
            print(line)


if __name__ == "__main__":
    main()
