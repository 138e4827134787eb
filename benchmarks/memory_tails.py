"""Which requests make up the slowest 5% of TTFT under memory pressure (sim runner), per eviction
policy: a conversation's first turn or a one-off prompt (nothing to reuse: a full prefill however
the cache is run), a later turn that missed (its previous turn's tail was evicted) or one that hit
(slow only from queueing behind others).

    python benchmarks/memory_tails.py --model nemotron_h-8b --workload chat --fraction 0.1
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import replace
from pathlib import Path

from memory_oracle import RATES
from memory_pressure import VARIANTS, WORKLOADS

from radixflow.bench.pressure import measure_working_set, pressure_figures, under_pressure
from radixflow.bench.provenance import write_figures
from radixflow.cli.args import non_negative_int, positive_float
from radixflow.options import EngineOptions, plan_engine
from radixflow.problems import ProblemError, flag
from radixflow.scheduler.request import Request
from radixflow.workloads.build import build_workload

TAIL = 0.05


def kind(req: Request, previous: dict[str, int]) -> str:
    """What ``req`` could reuse at best, against what it did (``previous``: the prompt length of the
    turn before it in its conversation, by request id). Pure."""
    before = previous.get(req.id, 0)
    if before == 0:
        return "first turn / one-off"
    return "later turn, hit" if req.reused >= before - before % 16 - 16 else "later turn, missed"


def previous_turns(requests: list[Request]) -> dict[str, int]:
    """Each chat turn's predecessor's prompt length (ids ``g<G>c<K>``); absent for a first turn."""
    out: dict[str, int] = {}
    by_id = {r.id: r for r in requests}
    for r in requests:
        if r.id.startswith("g") and "c" in r.id:
            g, k = r.id[1:].split("c")
            prev = by_id.get(f"g{g}c{int(k) - 1}")
            if prev is not None:
                out[r.id] = len(prev.prompt)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="nemotron_h-8b")
    p.add_argument("--hardware", default="h100")
    p.add_argument("--workload", default="chat", choices=list(WORKLOADS))
    p.add_argument("--fraction", type=positive_float, default=0.1)
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--json", type=Path, help="write each variant's figures and slowest requests here")
    p.add_argument("--smoke", action="store_true", help="CI: a small chat workload on qwen3_5-2b")
    args = p.parse_args()
    try:
        run_from_args(args)
    except ProblemError as e:  # an unknown model, hardware or policy: one line, as radixflow's own flags
        p.error(e.problem.render(flag))


def run_from_args(args: argparse.Namespace) -> None:
    spec = WORKLOADS[args.workload]
    if args.smoke:
        args.model, spec = "qwen3_5-2b", replace(WORKLOADS["chat"], groups=4, candidates=3, context_len=128)
    spec = replace(spec, seed=args.seed, rate=RATES.get(args.model, spec.rate))
    base = EngineOptions(model=args.model, runner="sim", hardware=args.hardware, policy="adaptive")
    ws = measure_working_set(base, build_workload(spec).requests)
    capped = under_pressure(base, ws, args.fraction, spec.prompt_len)
    report = []
    for eviction, admission in VARIANTS:
        requests = build_workload(spec).requests
        engine = plan_engine(capped.replace(eviction=eviction, admission=admission))
        engine = engine.build([len(r.prompt) for r in requests]).engine()
        engine.run(requests)
        done = sorted(engine.requests, key=lambda r: r.ttft_s or 0.0)
        previous = previous_turns(done)
        tail = done[-max(1, round(TAIL * len(done))) :]
        figures = pressure_figures(engine.requests, None)
        kinds = Counter(kind(r, previous) for r in done)
        print(f"{eviction}/{admission}: hit {figures['hit_rate']:.3f} p95 {figures['ttft_p95_ms']:.0f} ms "
              f"mean {figures['mean_latency_ms']:.0f} ms; all requests: {dict(kinds)}")  # fmt: skip
        slowest = [{"id": r.id, "ttft_ms": 1e3 * (r.ttft_s or 0), "prompt": len(r.prompt), "reused": r.reused,
                    "kind": kind(r, previous)} for r in tail]  # fmt: skip
        report.append({"eviction": eviction, "admission": admission, **figures, "slowest": slowest})
        for r in tail:
            print(f"  {r.id:>7} ttft {1e3 * (r.ttft_s or 0):7.0f} ms  prompt {len(r.prompt):5}  "
                  f"reused {r.reused:5}  arrival {r.arrival_s:6.2f}s  {kind(r, previous)}")  # fmt: skip
    if args.json:
        write_figures(args.json, {"model": args.model, "variants": report})


if __name__ == "__main__":
    main()
