"""The batched delta-rule kernel at each chunk length, beside the length `pick_chunk` picks.

For mixes of segment lengths (one long prompt, a prefill of four prompts, candidates after a
context, a server round of short suffixes beside a chat prompt, ...), times
`gated_delta_rule_chunks` at every length in `CHUNK_SIZES` (thread-CPU time, one torch thread,
repeats interleaved across lengths, each first in turn, medians and their spread, min-max,
beside the machine's load average before and after) and prints the padded rows, the carry steps and
which length `pick_chunk` takes. This is the measurement `STEP_COST` was fitted to. Beside
them, interleaved, the native kernels' prefill (`NativeKernels.delta_rule_prefill`: the same
segments token by token in one C call) where the library builds here: the backend the engine's
``kernels`` option (``auto``) runs on a CPU in float32.

    python benchmarks/delta_rule_chunks.py [--heads 8 --dk 64 --dv 64] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_text, loads_now, rotated
from radixflow.cli.args import positive_int
from radixflow.models.kernels.backend import resolve_kernels
from radixflow.models.kernels.chunks import ChunkPlan
from radixflow.models.kernels.delta_rule import CHUNK_SIZES, gated_delta_rule_chunks, pick_chunk
from radixflow.models.kernels.native_kernels import NativeKernels
from radixflow.models.zoo import default_cache_dir

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


def inputs(lengths: list[int], heads: int, dk: int, dv: int) -> list[torch.Tensor]:
    rows, g = sum(lengths), torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1) * dk**-0.5
    k = F.normalize(torch.randn(rows, heads, dk, generator=g), dim=-1)
    v = torch.randn(rows, heads, dv, generator=g)
    gate, beta = -torch.rand(rows, heads, generator=g) * 0.1, torch.rand(rows, heads, generator=g)
    return [q, k, v, gate, beta]


def segments(lengths: list[int]) -> list[list[tuple[int, int, int | None]]]:
    segs, base = [], 0
    for n in lengths:
        segs.append([(base, base + n, None)])
        base += n
    return segs


def kernel_call(lengths: list[int], chunk: int, heads: int, dk: int, dv: int) -> tuple[Callable, ChunkPlan]:
    plan = ChunkPlan.build(segments(lengths), sum(lengths), chunk, torch.device("cpu"))
    args = inputs(lengths, heads, dk, dv)
    states = torch.zeros(len(lengths), heads, dk, dv)
    return lambda: gated_delta_rule_chunks(*args, states, plan, lambda *_: None), plan


def native_call(lengths: list[int], kernels: NativeKernels, heads: int, dk: int, dv: int) -> Callable:
    """The native prefill over the same segments (a fresh zero state per call, as above)."""
    args, segs = inputs(lengths, heads, dk, dv), segments(lengths)
    return lambda: kernels.delta_rule_prefill(
        *args, torch.zeros(len(lengths), heads, dk, dv), segs, lambda *_: None
    )


def measure(
    lengths: list[int], heads: int, dk: int, dv: int, repeats: int, native: NativeKernels | None
) -> dict[int | str, dict]:
    calls = {c: kernel_call(lengths, c, heads, dk, dv) for c in CHUNK_SIZES}
    fns: dict[int | str, Callable] = {c: fn for c, (fn, _) in calls.items()}
    if native is not None:
        fns["native"] = native_call(lengths, native, heads, dk, dv)
    times: dict[int | str, list[float]] = {c: [] for c in fns}
    for fn in fns.values():
        fn()  # warm-up
    for trial in range(repeats):
        for c in rotated(list(fns), trial):  # each first in turn: drift falls on each alike
            t0 = time.thread_time()
            fns[c]()
            times[c].append(time.thread_time() - t0)
    out: dict[int | str, dict] = {
        c: {**_ms(times[c]), "rows": len(plan.rows), "steps": len(plan.steps)}
        for c, (_, plan) in calls.items()
    }
    if native is not None:
        out["native"] = _ms(times["native"])
    return out


def _ms(seconds: list[float]) -> dict[str, float]:
    """The median of a length's repeats and their spread, in ms: on a shared machine a median
    alone cannot tell a slow repeat from a slower length."""
    return {
        "ms": statistics.median(seconds) * 1e3,
        "min_ms": min(seconds) * 1e3,
        "max_ms": max(seconds) * 1e3,
    }


def _cell(r: dict[str, float]) -> str:
    return f"{r['ms']:6.2f} ({r['min_ms']:.2f}-{r['max_ms']:.2f})"


def native_kernels() -> NativeKernels | None:
    kernels = resolve_kernels("auto", "cpu", torch.float32, default_cache_dir() / "kernels")
    return kernels if isinstance(kernels, NativeKernels) else None


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=positive_int, default=8)
    ap.add_argument("--dk", type=positive_int, default=64)
    ap.add_argument("--dv", type=positive_int, default=64)
    ap.add_argument("--repeats", type=positive_int, default=9)
    ap.add_argument("--json", type=Path, default=Path("results/delta_rule_chunks.json"))
    ap.add_argument("--smoke", action="store_true", help="two cases, small heads, one repeat (CI)")
    return ap.parse_args()


def run_case(name: str, lengths: list[int], args: argparse.Namespace, native: NativeKernels | None) -> dict:
    """Time one case at every chunk size (and the native scan), print its line: the case's
    figures."""
    measured = measure(lengths, args.heads, args.dk, args.dv, args.repeats, native)
    by_chunk = {c: r for c, r in measured.items() if isinstance(c, int)}
    pick = pick_chunk([[n] for n in lengths], args.heads, args.dk, args.dv)
    best = min(by_chunk, key=lambda c: by_chunk[c]["ms"])
    cols = "  ".join(f"{c}: {_cell(r)} ({r['rows']} rows, {r['steps']} steps)" for c, r in by_chunk.items())
    scan = f"  native {_cell(measured['native'])}" if "native" in measured else ""
    print(f"{name:<26} {cols}  pick {pick}  fastest {best}{scan}", flush=True)
    return {
        "case": name,
        "lengths": lengths,
        "by_chunk": by_chunk,
        "native": measured.get("native"),
        "pick": pick,
        "fastest": best,
    }


def main() -> None:
    args = arguments()
    cases = {k: CASES[k] for k in SMOKE_CASES} if args.smoke else CASES
    if args.smoke:
        args.heads, args.dk, args.dv, args.repeats = 2, 16, 16, 1
    torch.set_num_threads(1)
    load_before = loads_now()
    print(
        f"heads {args.heads}, dk {args.dk}, dv {args.dv}; thread-CPU ms, median (min-max) of "
        f"{args.repeats}; load average {load_text(load_before and load_before[0])} before"
    )
    native = native_kernels()
    results = [run_case(name, lengths, args, native) for name, lengths in cases.items()]
    total = {"picked": 0.0, "best": 0.0, "64": 0.0, "native": 0.0}
    for r in results:
        total["picked"] += r["by_chunk"][r["pick"]]["ms"]
        total["best"] += r["by_chunk"][r["fastest"]]["ms"]
        total["64"] += r["by_chunk"][64]["ms"]
        total["native"] += r["native"]["ms"] if r["native"] is not None else 0.0
    print(
        f"sum over cases: picked {total['picked']:.1f} ms, fastest per case {total['best']:.1f} ms, "
        f"always 64 {total['64']:.1f} ms"
        + (f", native {total['native']:.1f} ms" if native is not None else " (no native kernels here)")
    )
    load_after = loads_now()
    print(f"load average {load_text(load_after and load_after[0])} after")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    run = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "load_before": load_before,
        "load_after": load_after,
        "cases": results,
        "total": total,
    }
    write_figures(args.json, run)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
