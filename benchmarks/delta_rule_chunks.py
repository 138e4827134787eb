"""The batched delta-rule kernel at each chunk length, beside the length `pick_chunk` picks.

For mixes of segment lengths (one long prompt, a prefill of four prompts, candidates after a
context, a server round of short suffixes beside a chat prompt, ...), times
`gated_delta_rule_chunks` at every length in `CHUNK_SIZES` (thread-CPU time, one torch thread,
repeats interleaved across lengths, medians) and prints the padded rows, the carry steps and
which length `pick_chunk` takes. This is the measurement `STEP_COST` was fitted to.

    python benchmarks/delta_rule_chunks.py [--heads 8 --dk 64 --dv 64] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from radixflow.models.kernels.chunks import ChunkPlan
from radixflow.models.kernels.delta_rule import CHUNK_SIZES, gated_delta_rule_chunks, pick_chunk

CASES = {
    "server round": [11] * 12 + [70],
    "server round, short chat": [11] * 12 + [40],
    "30 suffixes": [11] * 30,
    "suffixes + 200": [11] * 12 + [200],
    "one prompt 424": [424],
    "one prompt 1024": [1024],
    "one prompt 2000": [2000],
    "prefill 512/128/384/256": [512, 128, 384, 256],
    "16 candidates of 24": [24] * 16,
    "context + 15 candidates": [400] + [24] * 15,
    "8 x 64": [64] * 8,
    "4 x 100": [100] * 4,
    "3 + 90": [3, 90],
}

SMOKE_CASES = ("server round", "3 + 90")


def kernel_call(lengths: list[int], chunk: int, heads: int, dk: int, dv: int) -> tuple[Callable, ChunkPlan]:
    rows, segs, base = sum(lengths), [], 0
    for n in lengths:
        segs.append([(base, base + n, None)])
        base += n
    plan = ChunkPlan.build(segs, rows, chunk, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1) * dk**-0.5
    k = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1)
    v = torch.randn(rows, heads, dv, generator=g)
    gate, beta = -torch.rand(rows, heads, generator=g) * 0.1, torch.rand(rows, heads, generator=g)
    states = torch.zeros(len(lengths), heads, dk, dv)
    return lambda: gated_delta_rule_chunks(q, k, v, gate, beta, states, plan, lambda *_: None), plan


def measure(lengths: list[int], heads: int, dk: int, dv: int, repeats: int) -> dict[int, dict]:
    calls = {c: kernel_call(lengths, c, heads, dk, dv) for c in CHUNK_SIZES}
    times: dict[int, list[float]] = {c: [] for c in CHUNK_SIZES}
    for fn, _ in calls.values():
        fn()  # warm-up
    for _ in range(repeats):
        for c, (fn, _) in calls.items():
            t0 = time.thread_time()
            fn()
            times[c].append(time.thread_time() - t0)
    return {
        c: {"ms": statistics.median(times[c]) * 1e3, "rows": len(plan.rows), "steps": len(plan.steps)}
        for c, (_, plan) in calls.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dk", type=int, default=64)
    ap.add_argument("--dv", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", type=Path, default=Path("results/delta_rule_chunks.json"))
    ap.add_argument("--smoke", action="store_true", help="two cases, small heads, one repeat (CI)")
    args = ap.parse_args()
    cases = {k: CASES[k] for k in SMOKE_CASES} if args.smoke else CASES
    if args.smoke:
        args.heads, args.dk, args.dv, args.repeats = 2, 16, 16, 1
    torch.set_num_threads(1)
    print(f"heads {args.heads}, dk {args.dk}, dv {args.dv}; thread-CPU ms, median of {args.repeats}")
    results, total = [], {"picked": 0.0, "best": 0.0, "64": 0.0}
    for name, lengths in cases.items():
        by_chunk = measure(lengths, args.heads, args.dk, args.dv, args.repeats)
        pick = pick_chunk([[n] for n in lengths], args.heads, args.dk, args.dv)
        best = min(by_chunk, key=lambda c: by_chunk[c]["ms"])
        cols = "  ".join(
            f"{c}: {r['ms']:6.2f} ({r['rows']} rows, {r['steps']} steps)" for c, r in by_chunk.items()
        )
        print(f"{name:<26} {cols}  pick {pick}  fastest {best}", flush=True)
        total["picked"] += by_chunk[pick]["ms"]
        total["best"] += by_chunk[best]["ms"]
        total["64"] += by_chunk[64]["ms"]
        results.append(
            {"case": name, "lengths": lengths, "by_chunk": by_chunk, "pick": pick, "fastest": best}
        )
    print(
        f"sum over cases: picked {total['picked']:.1f} ms, fastest per case {total['best']:.1f} ms, "
        f"always 64 {total['64']:.1f} ms"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    run = {"args": {k: str(v) for k, v in vars(args).items()}, "cases": results, "total": total}
    args.json.write_text(json.dumps(run, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
