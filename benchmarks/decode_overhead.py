"""Engine CPU per decoded token as sequences grow (sim runner, no torch): the pure-Python cost of
a decode step in the cache and the engine loop, per checkout, side by side.

Workloads: ``long``, one request of a 64-token prompt decoding ``--long-tokens`` (16000) tokens,
and ``many``, 128 requests decoding 1000 tokens each (block size 16, a cache that never evicts).
Each trial runs every checkout in a fresh process (``PYTHONPATH`` set to it), the order rotated
trial by trial; CPU is `time.process_time` around each step after the prefill round, per token
those steps decoded; and per step, over the first and last tenth of those steps: a step cost
that grows with the sequence shows as a last tenth dearer than the first. Medians
over ``--trials`` (3), with min-max, and the machine's load before and after (machines here
are shared).

    python benchmarks/decode_overhead.py --checkout /path/to/before --checkout .

Figures also go to ``--json`` (results/decode_overhead.json).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, rotated
from radixflow.cli.args import positive_int


def child(kind: str, long_tokens: int) -> dict[str, float]:
    """One run of ``kind`` in this process: µs of CPU per decoded token, and per step by tenths."""
    from radixflow.options import EngineOptions, plan_engine
    from radixflow.runners.sim import DEFAULT_SIM_MODEL
    from radixflow.scheduler import Request
    from radixflow.scheduler.sampling import SamplingParams

    options = EngineOptions(model=DEFAULT_SIM_MODEL, runner="sim", kv_blocks=200_000, state_slots=4096)
    engine = plan_engine(options).build().engine()
    rng = random.Random(1)
    count, tokens = (1, long_tokens) if kind == "long" else (128, 1000)
    sampling = SamplingParams(max_tokens=tokens, ignore_eos=True)
    reqs = [
        Request(f"r{i}", tuple(rng.randrange(32_000) for _ in range(64)), sampling=sampling)
        for i in range(count)
    ]
    for req in reqs:
        engine.submit(req)
    steps: list[float] = []
    while engine.has_work():
        t0 = time.process_time()
        engine.step()
        steps.append(time.process_time() - t0)
    steps = steps[1:]  # not the prefill round (its first token), nor its first use of the cost model
    decoded, tenth = sum(len(r.output) - 1 for r in reqs), max(len(steps) // 10, 1)
    return {
        "per_token_us": 1e6 * sum(steps) / decoded,
        "step_first_tenth_us": 1e6 * sum(steps[:tenth]) / tenth,
        "step_last_tenth_us": 1e6 * sum(steps[-tenth:]) / tenth,
    }


def run_child(checkout: str, kind: str, long_tokens: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(checkout)}
    args = [sys.executable, __file__, "--child", kind, "--long-tokens", str(long_tokens)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", help="a checkout's root (repeat; default: .)")
    ap.add_argument("--workload", choices=("long", "many"), action="append")
    ap.add_argument("--trials", type=positive_int, default=3)
    ap.add_argument("--long-tokens", type=positive_int, default=16_000)
    ap.add_argument("--json", type=Path, default=Path("results/decode_overhead.json"))
    ap.add_argument("--smoke", action="store_true", help="CI: the long workload of 200 tokens, one trial")
    ap.add_argument("--child", choices=("long", "many"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.long_tokens)))
        return
    if args.smoke:
        args.workload, args.trials, args.long_tokens = ["long"], 1, 200
    checkouts, kinds = args.checkout or ["."], args.workload or ["long", "many"]
    start = load_now()
    figures: dict[str, dict[str, list[dict[str, float]]]] = {}
    for kind in kinds:
        got: dict[str, list[dict[str, float]]] = {c: [] for c in checkouts}
        for trial in range(args.trials):
            for checkout in rotated(checkouts, trial):  # each first in turn: no order bias
                got[checkout].append(run_child(checkout, kind, args.long_tokens))
        for checkout, runs in got.items():
            print(f"{kind:5s} {checkout}: " + ", ".join(_spread(name, runs) for name in runs[0]))
        figures[kind] = got
    end = load_now()
    print(f"machine load (1-minute average): {load_text(start)} at the start, {load_text(end)} at the end")
    write_figures(args.json, {"trials": figures, "load": {"start": start, "end": end}})


def _spread(name: str, runs: list[dict[str, float]]) -> str:
    values = [run[name] for run in runs]
    return f"{name} {statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


if __name__ == "__main__":
    main()
