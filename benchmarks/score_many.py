"""Many contexts with candidates of their own: one `LLM.score` call per context against one
`LLM.score_many` call for all of them (what `radixflow score --input FILE` runs).

``--contexts`` contexts of ``--context-len`` random tokens, each with ``--candidates`` candidates
of ``--candidate-len`` tokens. ``per_context`` scores them as a loop over `score` does (each
context's batch alone); ``many`` in one `score_many` call, so the scheduler can fill a round with
several contexts' work. Every run draws fresh contexts (nothing cached from an earlier run);
modes are interleaved, their order rotated per repeat. Reported per mode: median wall time, its
spread, median CPU time of this process, the ratio of each to ``many`` (of the medians, and
repeat by repeat: its range and median), the load average, and whether every candidate's
logprobs equal across modes (within ``--atol``).

    python benchmarks/score_many.py --json results/score_many.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import loads_now, loads_text, paired_lines, rotated
from radixflow.cli.args import non_negative_float, non_negative_int, positive_int
from radixflow.generation.llm import LLM

Scores = list[list[tuple[float, ...]]]  # per context, per candidate: its tokens' logprobs


def fresh_jobs(rng: random.Random, args: argparse.Namespace, vocab: int) -> tuple[list, list]:
    def tokens(n: int) -> list[int]:
        return [rng.randrange(1, vocab) for _ in range(n)]

    contexts = [tokens(args.context_len) for _ in range(args.contexts)]
    candidates = [[tokens(args.candidate_len) for _ in range(args.candidates)] for _ in contexts]
    return contexts, candidates


def modes(llm: LLM) -> dict[str, Callable[[list, list], Scores]]:
    def per_context(contexts: list, candidates: list) -> Scores:
        return [[s.logprobs for s in llm.score(c, k)] for c, k in zip(contexts, candidates, strict=True)]

    def many(contexts: list, candidates: list) -> Scores:
        return [[s.logprobs for s in scores] for scores in llm.score_many(contexts, candidates)]

    return {"per_context": per_context, "many": many}


def close(a: Scores, b: Scores, atol: float) -> bool:
    pairs = [(x, y) for ca, cb in zip(a, b, strict=True) for x, y in zip(ca, cb, strict=True)]
    return all(len(x) == len(y) and max(map(abs, map(float.__sub__, x, y))) <= atol for x, y in pairs)


def measure(args: argparse.Namespace) -> dict:
    llm = LLM(args.model, torch_threads=args.torch_threads)
    vocab = args.vocab
    calls = modes(llm)
    rng = random.Random(args.seed)
    walls: dict[str, list[float]] = {m: [] for m in calls}
    cpus: dict[str, list[float]] = {m: [] for m in calls}
    same = True
    for rep in range(args.repeat + 1):  # the first round warms up and is not counted
        names = rotated(list(calls), rep)
        got = {}
        for name in names:
            contexts, candidates = fresh_jobs(random.Random(rng.random()), args, vocab)
            w0, c0 = time.perf_counter(), time.process_time()
            got[name] = calls[name](contexts, candidates)
            if rep:
                walls[name].append(time.perf_counter() - w0)
                cpus[name].append(time.process_time() - c0)
        one = fresh_jobs(random.Random(rep), args, vocab)
        same &= close(calls["per_context"](*one), calls["many"](*one), args.atol)
    base = statistics.median(walls["many"])
    base_cpu = statistics.median(cpus["many"])
    figures = {
        name: {
            "wall_s": statistics.median(walls[name]),
            "wall_min_s": min(walls[name]),
            "wall_max_s": max(walls[name]),
            "cpu_s": statistics.median(cpus[name]),
            "wall_ratio": statistics.median(walls[name]) / base,
            "cpu_ratio": statistics.median(cpus[name]) / base_cpu,
            "wall_runs_s": walls[name],  # trial t of each mode ran side by side
            "cpu_runs_s": cpus[name],
        }
        for name in calls
    }
    return {"model": args.model, "shape": shape(args), "modes": figures, "same_scores": same}


def shape(args: argparse.Namespace) -> dict:
    keys = ("contexts", "candidates", "context_len", "candidate_len", "repeat", "torch_threads")
    return {k: getattr(args, k) for k in keys}


def report(args: argparse.Namespace, result: dict) -> None:
    load = " before, ".join(map(loads_text, result["load_before_after"]))
    print(
        f"{args.model}: {args.contexts} contexts x {args.candidates} candidates ({args.context_len} + "
        f"{args.candidate_len} tokens), {args.repeat} repeats, load {load} after"
    )
    for name, f in result["modes"].items():
        spread = f"{f['wall_min_s']:.3f}-{f['wall_max_s']:.3f}"
        ratios = f"wall {f['wall_ratio']:.2f}x cpu {f['cpu_ratio']:.2f}x"
        print(f"  {name:12s} wall {f['wall_s']:.3f} s ({spread}) cpu {f['cpu_s']:.3f} s; / many: {ratios}")
    for what, key in (("wall time", "wall_runs_s"), ("CPU time", "cpu_runs_s")):
        for line in paired_lines(what, {m: f[key] for m, f in result["modes"].items()}, "many"):
            print(line)  # the ratios of medians above: their spread over the paired repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--contexts", type=positive_int, default=8)
    ap.add_argument("--candidates", type=positive_int, default=8)
    ap.add_argument("--context-len", type=positive_int, default=512)
    ap.add_argument("--candidate-len", type=positive_int, default=16)
    ap.add_argument("--repeat", type=positive_int, default=3)
    ap.add_argument("--torch-threads", type=positive_int, default=1)
    ap.add_argument("--seed", type=non_negative_int, default=0)
    ap.add_argument("--vocab", type=positive_int, default=1000, help="token ids drawn below this")
    ap.add_argument("--atol", type=non_negative_float, default=1e-4)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--smoke", action="store_true", help="qwen3_5-tiny, 2 x 2 candidates, one repeat (CI)")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.contexts, args.candidates = "qwen3_5-tiny", 2, 2
        args.context_len, args.candidate_len = 32, 4
        args.repeat, args.vocab = 1, 100
    torch.set_num_threads(args.torch_threads)
    before = loads_now()
    result = measure(args)
    result["load_before_after"] = [before, loads_now()]
    report(args, result)
    print(f"  same scores in both modes: {result['same_scores']}")
    if args.json:
        write_figures(Path(args.json), result)
    if not result["same_scores"]:  # the figures are kept above; the run itself failed
        raise SystemExit(f"scores differ between the modes by more than --atol {args.atol}")


if __name__ == "__main__":
    main()
