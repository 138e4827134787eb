"""`POST /v1/score` against `/v1/completions` with ``echo`` for the same scoring job.

K candidates after one shared context, all in one request, through `radixflow serve` (a process
of its own on a loopback port; this process is the client). Two ways to ask:

* ``score``: ``/v1/score`` with the context and the candidates as token ids; the answer carries
  each candidate's own tokens and logprobs;
* ``echo``: ``/v1/completions`` with the K joined prompts as token-id lists, ``echo``,
  ``logprobs: 0``, ``max_tokens: 0`` (the OpenAI way): the answer carries every prompt token's
  text, logprob and top entry, the context's K times over.

Both compute the same tokens (every run draws a fresh context: nothing is cached from an earlier
run). Each mode asked once untimed first (a warm-up), then interleaved, order rotated per repeat;
reported per mode: median wall time and its spread, median server CPU time (from /proc, less
disturbed by other load than wall time), the response's size, the ratio of each to ``score``'s
(of the medians, and repeat by repeat: its range and median), the machine's load average, and
whether the candidates' total logprobs agree within ``--atol``.

    python benchmarks/score_route.py --json results/score_route.json
    python benchmarks/score_route.py --model lfm2-small --candidates 128
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

import httpx
from per_candidate import cpu_seconds  # benchmarks/ is on sys.path when a script in it runs

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import loads_now, loads_text, paired_lines, rotated
from radixflow.cli.args import non_negative_float, positive_int
from radixflow.server.spawn import serve_process


def fresh(rng: random.Random, args: argparse.Namespace, vocab: int) -> tuple[list[int], list[list[int]]]:
    context = [rng.randrange(1, vocab) for _ in range(args.context_len)]
    length = args.candidate_len
    cands = [[rng.randrange(1, vocab) for _ in range(length)] for _ in range(args.candidates)]
    return context, cands


Job = tuple[str, list[int], list[list[int]]]  # cache salt, context, candidates


def ask_score(http: httpx.Client, model: str, job: Job) -> tuple[list[float], int]:
    salt, context, cands = job
    body = {"model": model, "context": context, "candidates": cands, "cache_salt": salt}
    r = http.post("/v1/score", json=body)
    r.raise_for_status()
    return [d["total_logprob"] for d in r.json()["data"]], len(r.content)


def ask_echo(http: httpx.Client, model: str, job: Job) -> tuple[list[float], int]:
    salt, context, cands = job
    prompts = [context + c for c in cands]
    body = {"model": model, "prompt": prompts, "echo": True, "logprobs": 0, "max_tokens": 0}
    body["cache_salt"] = salt
    r = http.post("/v1/completions", json=body)
    r.raise_for_status()
    choices = sorted(r.json()["choices"], key=lambda c: c["index"])
    totals = [sum(c["logprobs"]["token_logprobs"][len(context) :]) for c in choices]
    return totals, len(r.content)


MODES = {"score": ask_score, "echo": ask_echo}


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--candidates", type=positive_int, default=64)
    ap.add_argument("--context-len", type=positive_int, default=512)
    ap.add_argument("--candidate-len", type=positive_int, default=16)
    ap.add_argument("--repeat", type=positive_int, default=3)
    ap.add_argument("--atol", type=non_negative_float, default=1e-3, help="total logprobs agree within this")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: qwen3_5-tiny, 2 short candidates, once")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.candidates, args.context_len, args.candidate_len = "qwen3_5-tiny", 2, 24, 3
        args.repeat = 1
    return args


Seen = dict[str, list[tuple[float, float, int]]]  # per mode: (wall s, server CPU s, bytes) per repeat


def timings(http: httpx.Client, pid: int, args: argparse.Namespace) -> tuple[Seen, bool]:
    """Each way asked once untimed (a warm-up: the server's one-time costs, its kernel plans and
    allocator, would fall on whichever ran first), then each repeat's fresh job asked both ways,
    the order alternating: what each way took, and whether every candidate's two totals agreed
    within ``args.atol``."""
    rng = random.Random(0)
    vocab = http.get("/tokenizer_info").json()["vocab_size"]
    warm = fresh(random.Random(-1), args, vocab)  # a draw of its own: the timed jobs are unchanged
    for mode, ask in MODES.items():  # namespaces of their own: nothing cached for the timed jobs
        ask(http, args.model, (f"warm-up-{mode}", *warm))
    seen: Seen = {m: [] for m in MODES}
    agree = True
    for rep in range(args.repeat):
        context, cands = fresh(rng, args, vocab)  # one job per repeat, asked both ways
        order = rotated(list(MODES), rep)
        totals = {}
        for mode in order:
            job = (f"{rep}-{mode}", context, cands)  # a namespace of its own: nothing cached
            cpu0, t0 = cpu_seconds(pid), time.perf_counter()
            totals[mode], size = MODES[mode](http, args.model, job)
            wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
            seen[mode].append((wall, cpu, size))
        pairs = zip(totals["score"], totals["echo"], strict=True)
        agree = agree and all(abs(a - b) <= args.atol for a, b in pairs)
    return seen, agree


def table(seen: Seen, args: argparse.Namespace) -> dict:
    """Print each way's medians against `score`'s; the figures printed, by mode."""
    figures = {}
    base = tuple(statistics.median(run[i] for run in seen["score"]) for i in (0, 1))  # wall, cpu
    shape = f"{args.candidates} candidates of {args.candidate_len} tokens after {args.context_len}"
    print(f"{args.model}: {shape}; medians of {args.repeat}")
    heads = ("wall s", 8), ("spread", 14), ("server cpu s", 13), ("bytes", 10), ("wall x", 7), ("cpu x", 7)
    print(f"{'mode':8} " + " ".join(f"{h:>{w}}" for h, w in heads))
    for mode, runs in seen.items():
        walls = [w for w, _, _ in runs]
        wall, cpu, size = statistics.median(walls), statistics.median(c for _, c, _ in runs), runs[0][2]
        figures[mode] = {
            "wall_s": wall,
            "wall_min_s": min(walls),
            "wall_max_s": max(walls),
            "server_cpu_s": cpu,
            "response_bytes": size,
            "wall_runs_s": walls,  # trial t of each mode asked the same job side by side
            "server_cpu_runs_s": [c for _, c, _ in runs],
            "wall_ratio": wall / base[0],
            "cpu_ratio": cpu / base[1] if base[1] else None,
        }
        cpu_x = f"{cpu / base[1]:.2f}" if base[1] else "-"
        spread = f"{min(walls):6.3f}-{max(walls):.3f}"
        print(f"{mode:8} {wall:8.3f} {spread:>14} {cpu:13.2f} {size:10d} {wall / base[0]:7.2f} {cpu_x:>7}")
    for what, key in (("wall time", "wall_runs_s"), ("server CPU", "server_cpu_runs_s")):
        for line in paired_lines(what, {m: f[key] for m, f in figures.items()}, "score"):
            print(line)  # the ratios of medians above: their spread over the paired repeats
    return figures


def main() -> None:
    args = arguments()
    load_before = loads_now()
    serve = [args.model, "--torch-threads", "1", "--max-pending", str(max(64, 2 * args.candidates))]
    proc, url = serve_process(serve, 600)
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            seen, agree = timings(http, proc.pid, args)
    finally:
        proc.terminate()
        proc.wait()
    figures = table(seen, args)
    load_after = loads_now()  # read once: the load printed is the one written
    loads = f"load before {loads_text(load_before)}, after {loads_text(load_after)}"
    print(f"totals agree within {args.atol}: {agree}; {loads}")
    config = vars(args) | {"json": None}
    report = {"config": config, "modes": figures, "agree": agree, "load": [load_before, load_after]}
    if args.json is not None:
        write_figures(args.json, report)
        print(f"wrote {args.json}")
    if not agree:
        raise SystemExit("the two ways gave different totals")


if __name__ == "__main__":
    main()
