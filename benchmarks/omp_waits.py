"""`radixflow generate` timed under OpenMP's default (spinning) waits against passive waits and
one torch thread: each trial a fresh process per setting, the settings in rotated order, the
command's `main` timed after torch's import, the load average read after each (docs/usage.md,
"OpenMP waits"). The child calls `main` with its arguments, so the command's own wait default
(`omp_wait_default`, applied to the process's own command line only) leaves the setting alone.

    python benchmarks/omp_waits.py --model qwen3_5-small --trials 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_text, rotated
from radixflow.cli.args import int_arg

# name -> (environment added, torch threads); "spin" is libgomp's own default: no policy set
SETTINGS = {"spin": ({}, 2), "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, 2), "one_thread": ({}, 1)}
PROMPT = " ".join(["the quick brown fox jumps over the lazy dog"] * 25)
CHILD = """
import json, os, sys, time
import torch
from radixflow.bench.spread import load_now
from radixflow.cli.app import main
sys.stdout, out = open(os.devnull, "w"), sys.stdout
start = time.perf_counter()
code = main(sys.argv[1:])
seconds = time.perf_counter() - start
print(json.dumps({"code": code, "s": seconds, "load": load_now()}), file=out)
"""


def one_run(model: str, setting: str, max_tokens: int) -> dict[str, float]:
    """One `generate` in a fresh process under ``setting``: its seconds and the load after."""
    added, threads = SETTINGS[setting]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    argv = ["generate", model, "--runner", "torch", "--torch-threads", str(threads)]
    argv += ["--prompt", PROMPT, "--max-tokens", str(max_tokens), "--json"]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *argv], env=env | added, capture_output=True, text=True, check=True
    )
    figures = json.loads(done.stdout.splitlines()[-1])
    if figures["code"] != 0:
        raise SystemExit(f"{setting}: generate exited {figures['code']}\n{done.stderr[-2000:]}")
    return {"s": figures["s"], "load": figures["load"]}


def ratios(trials: list[dict[str, dict[str, float]]], top: str, bottom: str) -> dict[str, float]:
    """Median, lowest and highest of ``top``'s seconds over ``bottom``'s, trial by trial."""
    paired = [t[top]["s"] / t[bottom]["s"] for t in trials]
    return {"median": statistics.median(paired), "min": min(paired), "max": max(paired)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3_5-small")
    p.add_argument("--trials", type=int_arg(low=1), default=6)
    p.add_argument("--max-tokens", type=int_arg(low=1), default=16)
    p.add_argument("--smoke", action="store_true", help="CI: one trial of qwen3_5-tiny, 2 tokens")
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if args.smoke:
        args.model, args.trials, args.max_tokens = "qwen3_5-tiny", 1, 2
    names = list(SETTINGS)
    trials = [
        {n: one_run(args.model, n, args.max_tokens) for n in rotated(names, t)} for t in range(args.trials)
    ]
    loads = [run["load"] for t in trials for run in t.values() if run["load"] is not None]
    figures = {
        "model": args.model,
        "trials": trials,
        "spin_over_passive": ratios(trials, "spin", "passive"),
        "passive_over_one_thread": ratios(trials, "passive", "one_thread"),
        "load": {"min": min(loads), "max": max(loads)} if loads else None,
    }
    for name in names:
        print(f"{name:>10}: median {statistics.median(t[name]['s'] for t in trials):.2f} s")
    for key in ("spin_over_passive", "passive_over_one_thread"):
        r = figures[key]
        print(f"{key}: median {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")
    shown = f"{load_text(min(loads))}-{load_text(max(loads))}" if loads else "n/a"
    print(f"load average {shown}")
    if args.json:
        write_figures(args.json, figures)


if __name__ == "__main__":
    main()
