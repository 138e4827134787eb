"""How far a sim twin's mean latency moves when the price of its rounds moves a little.

For each cell of a stored `policies_torch.py` run (``--cells`` workloads), the sim twin of that
cell (same workload, rate, budgets; the profile ``--profile``, a directory: FAMILY.json in it) is
run again with every round's time multiplied by a log-normal factor (``--noise`` σ, drawn per
round, ``--seeds`` draws) and with every round's time off by ``--bias`` either way. Printed per
policy beside the real run's repeats: what a per-round price noise of that size does to one run's
mean latency, and how much a uniform price error is amplified through the queue. Where those
spreads are as wide as the criterion, one run's mean cannot be compared to it.

    python benchmarks/twin_sensitivity.py --run results/policies_torch.json \\
        --profile results/policies_torch.profiles --cells poisson
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from radixflow.bench.metrics import percentile
from radixflow.bench.policy_cells import WORKLOADS, workload_spec
from radixflow.bench.provenance import write_figures
from radixflow.bench.twin_runs import POLICIES, sim_figures
from radixflow.cli.args import float_arg, non_negative_float, positive_int
from radixflow.options import EngineOptions, plan_engine
from radixflow.runners import sim as sim_runner
from radixflow.workloads.build import build_workload

sys.path.insert(0, str(Path(__file__).resolve().parent))
import policies_torch as pt  # its --smoke run, and the profile it runs its twin on

PRICE = {"rng": random.Random(0), "sigma": 0.0, "factor": 1.0}  # read by the patched sim runner


def priced_run(self: sim_runner.SimRunner, batch):  # type: ignore[no-untyped-def]
    result = RUN(self, batch)
    noise = math.exp(PRICE["rng"].gauss(0, PRICE["sigma"])) if PRICE["sigma"] else 1.0
    f = PRICE["factor"] * noise
    return replace(result, duration_s=result.duration_s * f, worker_call_s=result.worker_call_s * f)


RUN = sim_runner.SimRunner.run


def twin_means(cell: dict, shape: dict, profile: Path, sigma: float, factor: float, seed: int) -> dict:
    PRICE.update(rng=random.Random(seed), sigma=sigma, factor=factor)
    plan = plan_engine(EngineOptions(runner="torch", model=cell["family"]))
    spec = workload_spec(cell["workload"], shape, plan.choice.vocab_size, cell["rate_per_s"])
    lengths = [len(r.prompt) for r in build_workload(spec).requests]
    sim = sim_figures(cell["family"], spec, plan.scheduler_config(lengths), profile)
    return {p: sim[p]["mean_latency_s"] for p in POLICIES} if "error" not in sim else {}


def change(mean: float | None, base: float | None) -> float | None:
    """mean's relative change from base; None where either twin completed nothing."""
    return None if mean is None or not base else mean / base - 1


def sensitivity(cell: dict, shape: dict, profile: Path, args: argparse.Namespace) -> dict:
    base = twin_means(cell, shape, profile, 0.0, 1.0, 0)
    noisy = [twin_means(cell, shape, profile, args.noise, 1.0, s) for s in range(args.seeds)]
    low = twin_means(cell, shape, profile, 0.0, 1 - args.bias, 0)
    high = twin_means(cell, shape, profile, 0.0, 1 + args.bias, 0)
    out = {}
    for p in base:
        # a draw that errored ({}) or completed nothing has no change: left out, not a crash
        runs = sorted(c for c in (change(n.get(p), base[p]) for n in noisy) if c is not None)
        real = cell["policies"][p]["mean_latency_runs_s"]
        out[p] = {
            "twin_mean_s": base[p],
            "noise_median": statistics.median(runs) if runs else None,
            # interpolated, as the bench
            "noise_10_90": [percentile(runs, 10), percentile(runs, 90)] if runs else [None, None],
            "price_low": change(low.get(p), base[p]),
            "price_high": change(high.get(p), base[p]),
            "real_runs_s": real,
            "real_spread": (max(real) - min(real)) / statistics.median(real),
        }
    return out


def signed(x: float | None) -> str:
    """A relative change as printed; "n/a" where the twin had none."""
    return "n/a" if x is None else f"{x:+.0%}"


def report_line(cell: dict, p: str, r: dict, args: argparse.Namespace) -> str:
    """One policy's printed line."""
    lo, hi = r["noise_10_90"]
    twin = "n/a" if r["twin_mean_s"] is None else f"{r['twin_mean_s']:.3f} s"
    runs = " ".join(f"{x:.3f}" for x in r["real_runs_s"])
    return (
        f"{cell['family']:17s} {cell['workload']:8s} {p:9s} twin {twin}; "
        f"price noise {args.noise:.0%}/round: 10-90% {signed(lo)}..{signed(hi)}; "
        f"price {-args.bias:+.0%} / {args.bias:+.0%}: "
        f"{signed(r['price_low'])} / {signed(r['price_high'])}; "
        f"real repeats {runs} (spread {r['real_spread']:.0%})"
    )


def missing_flag(args: argparse.Namespace) -> str | None:
    """What the flags lack, in one line; None: nothing."""
    if args.smoke and args.json is None:
        return "--smoke writes its policies_torch run beside --json: give --json"
    if args.smoke:
        return None
    if args.run is None:
        return "--run: give a stored policies_torch.py JSON (or --smoke)"
    if args.profile is None:
        return "--profile: give the twin's profile (a file, or a directory: FAMILY.json)"
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, help="a stored policies_torch.py JSON")
    ap.add_argument("--profile", type=Path, help="the twin's profile (a directory: FAMILY.json)")
    ap.add_argument("--cells", nargs="+", default=["poisson"], choices=list(WORKLOADS))
    noise, bias = "σ of the per-round log-normal price factor", "a uniform price error, either way, 0 to 0.9"
    ap.add_argument("--noise", type=non_negative_float, default=0.05, help=noise)
    ap.add_argument("--bias", type=float_arg(0.0, 0.9), default=0.10, help=bias)
    ap.add_argument("--seeds", type=positive_int, default=20, help="noisy draws per cell")
    ap.add_argument("--smoke", action="store_true", help="policies_torch's smoke run, 3 seeds (CI)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    missing = missing_flag(args)
    if missing:  # before policies_torch's smoke run: it takes minutes
        ap.error(missing)
    if args.smoke:
        args.run, args.seeds = args.json.with_suffix(".run.json"), 3
        args.profile = pt.PROFILE
        own, sys.argv = (
            sys.argv,
            ["policies_torch.py", "--smoke", "--twin", "profile", "--json", str(args.run)],
        )
        try:
            pt.main()
        finally:  # this script's own command, for its --json's run block
            sys.argv = own
    try:
        run = json.loads(args.run.read_text())
    except OSError as e:
        raise SystemExit(f"--run {args.run}: cannot read it ({e.strerror})") from None
    sim_runner.SimRunner.run = priced_run  # type: ignore[method-assign]
    report = []
    for cell in (c for c in run["cells"] if c["workload"] in args.cells):
        profile = args.profile / f"{cell['family']}.json" if args.profile.is_dir() else args.profile
        result = sensitivity(cell, run["config"]["workload"], profile, args)
        report.append({"family": cell["family"], "workload": cell["workload"], "policies": result})
        for p, r in result.items():
            print(report_line(cell, p, r, args))
    if args.json is not None:
        write_figures(args.json, {"cells": report})


if __name__ == "__main__":
    main()
