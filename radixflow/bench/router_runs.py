"""Each router's run in a served-fleet benchmark (`benchmarks/fleet_serve.py`): its trials
(`Trial`), what it answered and lost, and its Ctrl-C (`RouterRun`); the medians and wall-time
spread over its trials (`summarize`); the order each trial visits the routers in (`rotated`); and
the lines printed for it (`report`). Pure, but for `report`'s printing."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Trial:
    """One router's share of one trial: the trial's traffic sent to its server."""

    trial: int
    wall_s: float
    mean_latency_s: float | None  # None: no request answered, no latency to average
    reuse_rate: float | None  # of this trial's prompts (the /fleet figures' growth over it)
    load_1min: float | None  # the machine's load average as the trial began (None: none read)


@dataclass
class RouterRun:
    """One router's run: its requests over every trial, answered and lost, its trials and the
    medians over them, its replicas' ``/fleet`` figures, and how its server took the Ctrl-C."""

    router: str
    requests: int = 0  # over every trial
    answered: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    # medians over the trials (None: no trial measured one); the wall time's spread, min and max
    wall_s: float | None = None
    wall_spread_s: list[float] = field(default_factory=list)
    mean_latency_s: float | None = None
    reuse_rate: float | None = None
    per_replica: dict[str, Any] = field(default_factory=dict)  # /fleet after the last trial
    drain_answered: int = 0
    drain_sent: int = 0
    exit_code: int | None = None
    stopped_s: float | None = None
    ray_processes_left: int | None = None


def median(values: list[float | None]) -> float | None:
    """The median of the values measured (None where none was). Pure."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarize(run: RouterRun) -> None:
    """``run``'s medians and wall-time spread from its trials (mutates ``run``)."""
    walls = [t.wall_s for t in run.trials]
    run.wall_s = median(list(walls))
    run.wall_spread_s = [min(walls), max(walls)] if walls else []
    run.mean_latency_s = median([t.mean_latency_s for t in run.trials])
    run.reuse_rate = median([t.reuse_rate for t in run.trials])


def report(run: RouterRun, repeat: int) -> None:
    """``run``'s line (medians over its ``repeat`` trials, its Ctrl-C), then one per replica and
    its first distinct errors."""
    reuse = "n/a" if run.reuse_rate is None else f"{run.reuse_rate:.3f}"
    latency = "n/a" if run.mean_latency_s is None else f"{run.mean_latency_s * 1e3:.0f} ms"
    low, high = run.wall_spread_s
    print(
        f"{run.router:>10}: {run.answered}/{run.requests} answered, {run.lost} lost; medians of "
        f"{repeat}: reuse {reuse}, mean latency {latency}, wall {run.wall_s:.1f} s "
        f"(spread {low:.1f}-{high:.1f} s); Ctrl-C: "
        f"{run.drain_answered}/{run.drain_sent} drained, exit {run.exit_code} after "
        f"{run.stopped_s or 0:.1f} s, {run.ray_processes_left} Ray processes left",
        flush=True,
    )
    for name, f in run.per_replica.items():
        print(f"{'':>12}replica {name}: {f['answered']} answered, reuse {f['reuse_rate']}")
    for e in sorted(set(run.errors))[:5]:
        print(f"{'':>12}error: {e}")
