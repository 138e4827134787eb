"""Prefill and decode speed of the model under each CPU GEMM plan (`radixflow.runners.matmul`).

For each model: the plan "auto" measures at startup (printed with its probe timings), then the
same weights run under ``mkl``, ``onednn``, ``single=native`` (the native few-row product for
decode rounds of 1-4 rows, MKL elsewhere; where the native kernels build) and the measured plan:
a prefill of ``--prefill`` prompts from scratch (tok/s) and decode rounds of 1, 8 and 32
one-token rows (ms per round), with the largest logit difference from the MKL plan beside each.
Repeats are interleaved across plans (each first in turn) and medians reported with their spread
(min-max), since the machine is shared and noisy; the 1-minute load average after each case is
printed beside it and written with it.

    python benchmarks/matmul_plans.py --models qwen3_5-small lfm2-small nemotron_h-small
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now, load_text, rotated
from radixflow.cli.args import positive_int
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.io.loader import load_model
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.zoo import ensure_model
from radixflow.runners.linear_backends import BACKENDS
from radixflow.runners.matmul import MatmulRouter, install, parse_plan
from radixflow.runners.matmul_measure import dominant_weight, measure_plan

sys.path.insert(0, str(Path(__file__).parent))
from decode_step import setup  # the decode-round setup shared with decode_step.py


def prefill(model, router: MatmulRouter, lengths: list[int]) -> tuple[float, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    specs, nxt = [], 0
    for n in lengths:
        blocks = -(-n // 16)
        tokens = torch.randint(0, int(model.config.vocab_size), (n,), generator=g).tolist()
        specs.append((tokens, SeqSpec(0, n, list(range(nxt, nxt + blocks)))))
        nxt += blocks
    kv = KVPool(model.kv_layout(), nxt, 16, torch.float32, "cpu")
    state = StatePool(model.state_layout(), 0, torch.float32, "cpu")
    t0 = time.perf_counter()
    with torch.inference_mode(), router.round(decode_only=False):
        fb = ForwardBatch.build(specs, kv, state, "cpu")
        logits = model.compute_logits(model(fb)[fb.last_token_indices()])
    return time.perf_counter() - t0, logits


def decode(model, router: MatmulRouter, pools) -> tuple[float, torch.Tensor]:
    kv, state, chunks = pools
    t0 = time.perf_counter()
    with torch.inference_mode(), router.round(decode_only=True):
        logits = model.compute_logits(model(ForwardBatch.build(chunks, kv, state, "cpu")))
    return time.perf_counter() - t0, logits


def timed_repeats(run: Callable[[str], tuple[float, object]], plans: list[str], repeats: int) -> dict:
    """Each plan's seconds (``run``'s first value) over ``repeats`` interleaved repeats, each plan
    first in turn (`rotated`: drift between them falls on each alike)."""
    times: dict[str, list[float]] = {k: [] for k in plans}
    for trial in range(repeats):
        for k in rotated(plans, trial):
            times[k].append(run(k)[0])
    return times


def bench(name: str, lengths: list[int], batches: list[int], repeats: int) -> dict[str, object]:
    """Print one model's rows as they come; return them for the JSON."""
    path = ensure_model(name)
    weight = dominant_weight(load_model(path))
    t0 = time.perf_counter()
    auto = measure_plan(weight)
    took = time.perf_counter() - t0
    probes = "; ".join(f"{c}: " + ", ".join(f"{n} {1e6 * t:.0f} us" for n, t in ts) for c, ts in auto.timings)
    print(f"{name}: auto plan {auto.describe()} in {1e3 * took:.1f} ms ({probes})", flush=True)
    given = ["mkl", "onednn"] + (["single=native"] if BACKENDS["native"].problem() is None else [])
    plans = {k: parse_plan(k) for k in given} | {"auto": auto}
    models = {k: load_model(path) for k in plans}
    routers = {k: install(models[k], plan) for k, plan in plans.items()}
    cases = {"prefill": lambda k: prefill(models[k], routers[k], lengths)}
    for b in batches:
        pools = {k: setup(models[k], b, 64, seed=b) for k in plans}
        cases[f"decode {b}"] = lambda k, p=pools: decode(models[k], routers[k], p[k])
    result: dict[str, object] = {"model": name, "auto_plan": auto.describe(), "cases": {}}
    for case, run in cases.items():
        first = {k: run(k)[1] for k in plans}  # warm-up, and the logits to compare
        times = timed_repeats(run, list(plans), repeats)
        cells, figures = [], {}
        for k in plans:
            med, low, high = statistics.median(times[k]), min(times[k]), max(times[k])
            rate = f"{sum(lengths) / med:7.0f} tok/s" if case == "prefill" else f"{1e3 * med:7.1f} ms"
            spread = f"{1e3 * low:.1f}-{1e3 * high:.1f} ms"
            diff = (first[k] - first["mkl"]).abs().max().item()
            cells.append(f"{k} {rate} ({spread}; max |Δlogit| vs mkl {diff:.1e})")
            figures[k] = {"median_s": med, "min_s": low, "max_s": high, "max_dlogit_vs_mkl": diff}
        load = load_now()  # read once: the figure printed is the one written
        result["cases"][case] = {"load_1min": load, "plans": figures}  # type: ignore[index]
        print(f"  {case:9s}: " + "  ".join(cells) + f"  load {load_text(load)}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen3_5-small", "lfm2-small", "nemotron_h-small"])
    ap.add_argument("--prefill", nargs="+", type=positive_int, default=[512] * 4, help="prompt lengths")
    ap.add_argument("--batches", nargs="+", type=positive_int, default=[1, 8, 32])
    ap.add_argument("--repeats", type=positive_int, default=7)
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="one tiny model, tiny shapes, one repeat (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.prefill, args.batches, args.repeats = ["qwen3_5-tiny"], [16, 8], [2], 1
    torch.set_num_threads(args.threads)
    print(f"threads={args.threads}")
    results = []
    for name in args.models:
        with contextlib.suppress(KeyboardInterrupt):
            results.append(bench(name, args.prefill, args.batches, args.repeats))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, {"threads": args.threads, "results": results})


if __name__ == "__main__":
    main()
