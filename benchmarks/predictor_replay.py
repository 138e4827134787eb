"""The torch runner's round predictor replayed on recorded rounds, under several settings.

Each round is predicted, then observed, in the order the runner ran it (one runner per family, as
`policies_torch.py` runs them), so settings of the online fit (`costmodel.round_cost.online_fit`:
the curve's ``window``, the speed's ``gain``, the token-pair term on or off) are compared on the
same rounds at no cost of a real run. The error is the bench's: |predicted − measured| / measured
after the predictor's first rounds, the median per run, then the median over a cell's repeats.

Rounds come from a real run (``--rounds``, written by ``policies_torch.py --rounds-out``) or from
the sim (``--sim``): the rounds `policies_torch.py`'s workloads schedule, priced by a profile, times
a machine speed that drifts (``--drift``: none, a random walk, steps of 15-25%, a ±15% wave) and
a per-round noise. ``window=32,gain=0,pairs=0`` is the fit as it was before the speed was tracked.

    python benchmarks/policies_torch.py --families qwen3_next-small --rounds-out /tmp/r.jsonl
    python benchmarks/predictor_replay.py --rounds /tmp/r.jsonl
    python benchmarks/predictor_replay.py --sim qwen3_next-small --profile P.json --drift steps
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from radixflow.bench.metrics import PREDICTOR_WARMUP_ROUNDS
from radixflow.bench.policy_cells import MEDIUM_LOAD, SHAPE, WORKLOADS, workload_spec
from radixflow.bench.provenance import write_figures
from radixflow.bench.twin_runs import POLICIES, run_one
from radixflow.cli.args import non_negative_float, positive_int
from radixflow.costmodel.round_cost.fitted_rates import fit_features
from radixflow.costmodel.round_cost.online_fit import OnlineFit, nominal_prior, nominal_rates
from radixflow.options import EngineOptions, EngineSetup, plan_engine
from radixflow.runners import sim as sim_runner
from radixflow.scheduler.request import Request
from radixflow.workloads.build import build_workload

PROFILE = Path(__file__).resolve().parent.parent / "experiments" / "profiles" / "cpu.json"
VARIANTS = ["window=32,gain=0,pairs=0", "window=128,gain=0", "window=128,gain=0.25"]
DRIFTS = ("none", "walk", "steps", "wave")


@dataclass(frozen=True)
class Round:
    family: str
    cell: tuple[str, str, int]  # workload, policy, repeat
    features: list[float]
    seconds: float


def read_rounds(path: Path) -> list[Round]:
    """The rounds ``policies_torch.py --rounds-out`` wrote, one JSON object a line; a line that
    is not one is a one-line exit naming it (the cell's JSON given for its rounds, say)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SystemExit(f"--rounds {path}: cannot read it ({e.strerror})") from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(parse_round(line))
        except (ValueError, KeyError, TypeError) as e:
            what = "not a recorded round (policies_torch.py --rounds-out)"
            raise SystemExit(f"--rounds {path} line {number}: {what}: {e!r}") from None
    return out


def parse_round(line: str) -> Round:
    r = json.loads(line)
    return Round(r["family"], (r["workload"], r["policy"], r["repeat"]), r["features"], r["seconds"])


def sim_rounds(family: str, profile: Path, workloads: list[str], repeats: int) -> list[Round]:
    """The rounds the sim schedules for ``policies_torch``'s workloads, priced by ``profile``."""
    plan = plan_engine(EngineOptions(runner="sim", model=family, hardware=str(profile)))
    seen: list[list[float]] = []
    runner_run = sim_runner.SimRunner.run

    def run(self: sim_runner.SimRunner, batch):  # type: ignore[no-untyped-def]
        seen.append(fit_features(self.spec, sim_runner.chunk_shapes(batch.chunks)))
        return runner_run(self, batch)

    def rounds(setup: EngineSetup, requests: list[Request], key: tuple) -> tuple[list[Round], float]:
        seen.clear()
        engine, _ = run_one(setup, key[1], requests)
        times = [r.worker_call_s for r in engine.rounds]
        return [Round(family, key, f, t) for f, t in zip(seen, times, strict=True)], engine.now

    sim_runner.SimRunner.run = run  # type: ignore[method-assign]
    out, rate = [], None
    try:
        for name in workloads:
            spec = workload_spec(name, SHAPE, plan.choice.vocab_size, rate)
            requests = build_workload(spec).requests
            setup = plan.build([len(r.prompt) for r in requests])
            for repeat, policy in itertools.product(range(repeats), POLICIES):
                taken, now = rounds(setup, requests, (name, policy, repeat))
                out += taken
                if name == "grouped" and policy == "native":  # Poisson at half native's rate
                    rate = MEDIUM_LOAD * len(requests) / now
    finally:
        sim_runner.SimRunner.run = runner_run  # type: ignore[method-assign]
    return out


def speeds(n: int, drift: str, rng: random.Random) -> list[float]:
    """A machine speed per round: the factor every round's time is multiplied by."""
    if drift == "none":
        return [1.0] * n
    if drift == "walk":  # log-speed random walk, 1.5% a round
        walk = [0.0]
        for _ in range(n - 1):
            walk.append(walk[-1] + rng.gauss(0, 0.015))
        return [math.exp(w) for w in walk]
    if drift == "steps":  # a step of 15-25% every 20-60 rounds
        speed, out, left = 1.0, [], rng.randint(20, 60)
        for _ in range(n):
            left -= 1
            if left == 0:
                speed, left = speed * rng.choice([0.8, 0.85, 1 / 0.85, 1.25]), rng.randint(20, 60)
            out.append(speed)
        return out
    phase = rng.uniform(0, 2 * math.pi)  # wave: ±15% over 100 rounds
    return [1 + 0.15 * math.sin(phase + 2 * math.pi * i / 100) for i in range(n)]


VARIANT_FORM = "KEY=VALUE pairs, window=W (rounds, at least 1), gain=G (in [0, 1)), pairs=0|1"


def _variant_options(variant: str) -> dict[str, str]:
    """The settings ``variant`` names; ValueError for one that is not ``KEY=VALUE`` of a known key
    with a value the fit takes (a typo of a key ran the default under the typo's label)."""
    pairs = [kv.partition("=") for kv in variant.split(",")]
    if any(not sep or not key or not value for key, sep, value in pairs):
        raise ValueError(f"expected {VARIANT_FORM}")
    opts = {key: value for key, _, value in pairs}
    if unknown := sorted(set(opts) - {"window", "gain", "pairs"}):
        raise ValueError(f"no setting {', '.join(unknown)}; expected {VARIANT_FORM}")
    checks = {
        "window": lambda v: v.isdigit() and int(v) >= 1,
        "gain": _gain_ok,
        "pairs": lambda v: v in ("0", "1"),
    }
    if bad := [k for k, v in opts.items() if not checks[k](v)]:
        raise ValueError(f"{bad[0]}={opts[bad[0]]} cannot run; expected {VARIANT_FORM}")
    return opts


def _gain_ok(text: str) -> bool:
    """A speed gain the fit takes: a number in [0, 1)."""
    try:
        return 0 <= float(text) < 1
    except ValueError:
        return False


def parse_variant(text: str) -> str:
    """argparse type for ``--variants``: the variant as given (its label), refused in one line
    where it cannot run as named."""
    try:
        _variant_options(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: {e}") from None
    return text


def make_fit(variant: str) -> tuple[OnlineFit, Callable[[list[float]], list[float]]]:
    """``window=W,gain=G,pairs=0|1`` -> a fresh fit from the nominal prior and the features it reads."""
    opts = _variant_options(variant)
    fit = OnlineFit(
        nominal_prior(1), nominal_rates(1), int(opts.get("window", 128)), float(opts.get("gain", 0.25))
    )
    pairs = opts.get("pairs", "1") == "1"
    return fit, (lambda f: f) if pairs else (lambda f: [*f[:-1], 0.0])


def replay(rounds: list[Round], variant: str, times: list[float]) -> dict[tuple[str, str], float]:
    """{(workload, policy): median over repeats of each run's median error after the warm-up}."""
    fit, features = make_fit(variant)
    runs: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for r, t in zip(rounds, times, strict=True):
        f = features(r.features)
        if fit.rounds >= PREDICTOR_WARMUP_ROUNDS:
            runs[r.cell].append(abs(fit.predict(f) - t) / t)
        fit.observe(f, t)
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (workload, policy, _), errors in runs.items():
        cells[(workload, policy)].append(statistics.median(errors))
    return {k: statistics.median(v) for k, v in cells.items()}


def evaluate(rounds: list[Round], variants: list[str], drift: str, noise: float, seeds: int) -> dict:
    """Per variant: the median and the worst cell's error, averaged over ``seeds`` drifts (None:
    no round past the predictor's warm-up, no error to take)."""
    out = {}
    for v in variants:
        medians, worst, cells = [], [], {}
        for seed in range(seeds):
            rng = random.Random(seed)
            speed = speeds(len(rounds), drift, rng)
            times = [
                r.seconds * s * math.exp(rng.gauss(0, noise)) for r, s in zip(rounds, speed, strict=True)
            ]
            cells = replay(rounds, v, times)
            if cells:  # none: every run's rounds were in the predictor's warm-up
                medians.append(statistics.median(cells.values()))
                worst.append(max(cells.values()))
        out[v] = {
            "median_cell": statistics.mean(medians) if medians else None,
            "worst_cell": statistics.mean(worst) if worst else None,
            "cells": {f"{w}/{p}": round(e, 4) for (w, p), e in cells.items()},  # the last seed's
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=Path, help="recorded rounds (policies_torch.py --rounds-out)")
    ap.add_argument("--sim", nargs="+", metavar="FAMILY", help="rounds the sim schedules for these families")
    ap.add_argument(
        "--profile", type=Path, default=PROFILE, help="--sim: the price (a directory: FAMILY.json)"
    )
    ap.add_argument("--drift", nargs="+", choices=DRIFTS, help="--sim: machine speeds (default: all)")
    ap.add_argument("--noise", type=non_negative_float, default=0.04, help="--sim: per-round log-normal σ")
    ap.add_argument("--seeds", type=positive_int, default=3, help="--sim: drifts drawn per setting")
    ap.add_argument("--variants", nargs="+", type=parse_variant, default=VARIANTS)
    ap.add_argument(
        "--smoke", action="store_true", help="one family's grouped rounds in the sim, one seed (CI)"
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.smoke:
        args.sim, args.drift, args.seeds, args.rounds = ["qwen3_5-small"], ["steps"], 1, None
    report: dict[str, dict] = {}
    if args.rounds is not None:
        by_family: dict[str, list[Round]] = defaultdict(list)
        for r in read_rounds(args.rounds):
            by_family[r.family].append(r)
        for family, rounds in by_family.items():
            report[f"{family} recorded"] = evaluate(rounds, args.variants, "none", 0.0, 1)
    for family in args.sim or []:
        profile = args.profile / f"{family}.json" if args.profile.is_dir() else args.profile
        workloads = ["grouped"] if args.smoke else list(WORKLOADS)
        rounds = sim_rounds(family, profile, workloads, 1 if args.smoke else 3)
        for drift in args.drift or DRIFTS:
            report[f"{family} sim, drift {drift}"] = evaluate(
                rounds, args.variants, drift, args.noise, args.seeds
            )
    for name, result in report.items():
        figures = "  ".join(
            f"{v}: {share(r['median_cell'])} / {share(r['worst_cell'])}" for v, r in result.items()
        )
        print(f"{name}: median cell / worst cell  {figures}")
    if args.json is not None:
        write_figures(args.json, report)


def share(error: float | None) -> str:
    return "no round past the warm-up" if error is None else f"{error:.1%}"


if __name__ == "__main__":
    main()
