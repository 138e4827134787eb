"""One call per candidate against one batch of the same candidates (issue 31, item 3).

K candidates share one context (``--context-len`` tokens, then ``--candidate-len`` tokens of their
own). Each is asked for in three ways, through `LLM` and through `radixflow serve` (a process of its
own on a loopback port, the client here):

* ``batch``: ONE call carrying all K prompts;
* ``sequential``: K calls one after another, each sent once the one before it has answered (as a
  client scoring candidates in a loop does): the first call computes the context, every later one
  is a prefix hit plus its own tokens, in a round of its own;
* ``concurrent`` (server only): K clients at once, one candidate each; the engine batches them.

Two kinds of call: ``score`` (max_tokens=0 and the prompt's logprobs: ``echo`` with ``logprobs=0``
on the server) and ``gen`` (``--gen-tokens`` greedy tokens). Every run draws a fresh context, so
each computes the same tokens (context once, every candidate once) and nothing is cached from an
earlier run. Each mode runs once untimed first (a warm-up), then the modes are interleaved, their
order rotated per repeat; reported per mode: median wall time, its spread (min-max), median CPU time
(this process's for `LLM`, the server process's for the server: less disturbed than wall time on a
shared machine), the ratio of each to ``batch`` (of the medians, and repeat by repeat: its range and
median), the machine's load average, and whether every mode's greedy tokens equal the batch's
(prompt logprobs within ``--atol``).

    python benchmarks/per_candidate.py --json results/per_candidate.json
    python benchmarks/per_candidate.py --models qwen3_5-small --candidates 32 --doors llm
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import loads_now, loads_text, paired_lines, rotated
from radixflow.cli.args import non_negative_float, non_negative_int, positive_int
from radixflow.generation.llm import LLM
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.params import SamplingParams
from radixflow.options import EngineOptions, plan_engine
from radixflow.server.spawn import serve_process

Answer = tuple[tuple[int, ...], tuple[float, ...]]  # greedy tokens, prompt logprobs (score)
Call = Callable[[list[list[int]]], list[Answer]]


@dataclass(frozen=True)
class Shape:
    candidates: int
    context_len: int
    candidate_len: int
    gen_tokens: int
    vocab: int


@dataclass(frozen=True)
class ModeFigures:
    wall_s: float  # median over repeats
    wall_min_s: float
    wall_max_s: float
    cpu_s: float  # median CPU time of the process that computes (LLM: this one; server: its own)
    wall_ratio: float  # median wall / batch's median wall
    cpu_ratio: float | None  # None: the batch's CPU read 0 (the server's is counted in 10 ms ticks)
    same_as_batch: bool  # greedy tokens equal, prompt logprobs within --atol, on every repeat
    wall_runs_s: list[float]  # each repeat's, in order: repeat r of every mode ran side by side
    cpu_runs_s: list[float]


def fresh_prompts(rng: random.Random, shape: Shape) -> list[list[int]]:
    context = [rng.randrange(1, shape.vocab) for _ in range(shape.context_len)]
    return [
        context + [rng.randrange(1, shape.vocab) for _ in range(shape.candidate_len)]
        for _ in range(shape.candidates)
    ]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # clock ticks: USER_HZ is 100 on Linux


# ---------------------------------------------------------------- LLM door
def llm_calls(llm: LLM, kind: str, gen_tokens: int) -> dict[str, Call]:
    params = (
        SamplingParams(max_tokens=0, prompt_logprobs=0)
        if kind == "score"
        else SamplingParams(max_tokens=gen_tokens, ignore_eos=True)
    )

    def answers(prompts: list[list[int]]) -> list[Answer]:
        return [_llm_answer(o) for o in llm.generate(prompts, params)]

    def sequential(prompts: list[list[int]]) -> list[Answer]:
        return [a for p in prompts for a in answers([p])]

    return {"batch": answers, "sequential": sequential}


def _llm_answer(output: GenerationOutput) -> Answer:
    scored = output.prompt_logprobs or ()
    return tuple(output.token_ids), tuple(e.logprob for e in scored if e is not None)


# ---------------------------------------------------------------- server door
def spawn(model: str, threads: int | None) -> tuple[subprocess.Popen[str], str]:
    """`radixflow serve` in a process of its own on a loopback port: (process, base url)."""
    threads_args = [] if threads is None else ["--torch-threads", str(threads)]
    return serve_process([model, *threads_args], ready_s=120)


def server_calls(http: httpx.Client, model: str, kind: str, gen_tokens: int) -> dict[str, Call]:
    body: dict[str, object] = {"model": model, "temperature": 0}
    if kind == "score":
        body |= {"max_tokens": 0, "echo": True, "logprobs": 0}
    else:
        body |= {
            "max_tokens": gen_tokens,
            "ignore_eos": True,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
        }

    def post(prompts: list[list[int]]) -> list[Answer]:
        r = http.post("/v1/completions", json={**body, "prompt": prompts})
        if r.status_code != 200:
            raise SystemExit(f"the server answered {r.status_code}: {r.text[:300]}")
        choices = sorted(r.json()["choices"], key=lambda c: c["index"])
        return [_server_answer(c, kind, len(p)) for c, p in zip(choices, prompts, strict=True)]

    def sequential(prompts: list[list[int]]) -> list[Answer]:
        return [a for p in prompts for a in post([p])]

    def concurrent(prompts: list[list[int]]) -> list[Answer]:
        with ThreadPoolExecutor(len(prompts)) as pool:
            return [a for answer in pool.map(lambda p: post([p]), prompts) for a in answer]

    return {"batch": post, "sequential": sequential, "concurrent": concurrent}


def _server_answer(choice: dict, kind: str, prompt_len: int) -> Answer:
    logprobs = choice.get("logprobs") or {}
    if kind == "score":
        return (), tuple(float(x) for x in logprobs["token_logprobs"][1:prompt_len])
    return tuple(int(t.removeprefix("token_id:")) for t in logprobs["tokens"]), ()


# ---------------------------------------------------------------- measuring
def measure(
    calls: dict[str, Call], shape: Shape, repeat: int, cpu: Callable[[], float], atol: float, seed: int
) -> dict[str, ModeFigures]:
    """Every mode ``repeat`` times, interleaved (order rotated each repeat), each on prompts of its
    own draw (never seen by the engine before). After the timed runs each mode's prompts go through
    the batch once more: its answers must equal the batch's (the cache changes when work runs,
    never what it computes)."""
    rng = random.Random(seed)
    modes = list(calls)
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    same = dict.fromkeys(modes, True)
    for r in range(repeat):
        order = rotated(modes, r)
        draws = {m: fresh_prompts(rng, shape) for m in order}
        got: dict[str, list[Answer]] = {}
        for mode in order:
            c0, t0 = cpu(), time.perf_counter()
            got[mode] = calls[mode](draws[mode])
            wall[mode].append(time.perf_counter() - t0)
            cpus[mode].append(cpu() - c0)
        for mode in order:  # the same prompts through the batch: equal answers (exactness)
            ref = got["batch"] if mode == "batch" else calls["batch"](draws[mode])
            same[mode] &= _agree(got[mode], ref, atol)
    base_w, base_c = statistics.median(wall["batch"]), statistics.median(cpus["batch"])
    return {
        m: ModeFigures(
            wall_s=round(statistics.median(wall[m]), 4),
            wall_min_s=round(min(wall[m]), 4),
            wall_max_s=round(max(wall[m]), 4),
            cpu_s=round(statistics.median(cpus[m]), 4),
            wall_ratio=round(statistics.median(wall[m]) / base_w, 3),
            cpu_ratio=round(statistics.median(cpus[m]) / base_c, 3) if base_c > 0 else None,
            same_as_batch=same[m],
            wall_runs_s=wall[m],
            cpu_runs_s=cpus[m],
        )
        for m in modes
    }


def print_paired(label: str, figures: dict[str, ModeFigures]) -> None:
    """Each mode against the batch repeat by repeat (`paired_lines`): the spread of its ratios."""
    for clock, key in (("wall time", "wall_runs_s"), ("CPU time", "cpu_runs_s")):
        trials = {m: getattr(f, key) for m, f in figures.items()}
        for line in paired_lines(f"{label}: {clock}", trials, "batch"):
            print(line)


def _agree(got: list[Answer], ref: list[Answer], atol: float) -> bool:
    for (tokens, lps), (rtokens, rlps) in zip(got, ref, strict=True):
        if tokens != rtokens or len(lps) != len(rlps):
            return False
        if any(abs(a - b) > atol for a, b in zip(lps, rlps, strict=True)):
            return False
    return True


def warm_up(calls: dict[str, dict[str, Call]], shape: Shape) -> None:
    """Every mode of every kind once, untimed, each on fresh prompts (none cached): one-time costs
    (kernel plans, made per shape) fall on no timed run."""
    rng = random.Random(-1)
    for call in (call for modes in calls.values() for call in modes.values()):
        call(fresh_prompts(rng, shape))


def run_llm(model: str, shape: Shape, args: argparse.Namespace) -> dict[str, dict[str, ModeFigures]]:
    llm = LLM(model, torch_threads=args.torch_threads, seed=0)
    calls = {kind: llm_calls(llm, kind, shape.gen_tokens) for kind in args.kinds}
    warm_up(calls, shape)
    return {
        k: measure(c, shape, args.repeat, time.process_time, args.atol, args.seed) for k, c in calls.items()
    }


def run_server(model: str, shape: Shape, args: argparse.Namespace) -> dict[str, dict[str, ModeFigures]]:
    proc, url = spawn(model, args.torch_threads)
    try:
        with httpx.Client(base_url=url, timeout=600, limits=httpx.Limits(max_connections=256)) as http:
            calls = {kind: server_calls(http, model, kind, shape.gen_tokens) for kind in args.kinds}
            warm_up(calls, shape)
            cpu = lambda: cpu_seconds(proc.pid)  # noqa: E731
            return {k: measure(c, shape, args.repeat, cpu, args.atol, args.seed) for k, c in calls.items()}
    finally:
        proc.terminate()
        proc.wait(60)


DOORS = {"llm": run_llm, "server": run_server}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3_5-small", "lfm2-small", "nemotron_h-small"])
    ap.add_argument("--doors", nargs="+", choices=list(DOORS), default=list(DOORS))
    ap.add_argument("--kinds", nargs="+", choices=["score", "gen"], default=["score", "gen"])
    ap.add_argument("--candidates", type=positive_int, default=16)
    ap.add_argument("--context-len", type=positive_int, default=512)
    ap.add_argument("--candidate-len", type=positive_int, default=32)
    ap.add_argument("--gen-tokens", type=positive_int, default=8)
    ap.add_argument("--vocab", type=positive_int, default=1000, help="token ids drawn below this")
    ap.add_argument("--repeat", type=positive_int, default=3)
    ap.add_argument("--torch-threads", type=positive_int, default=None)
    ap.add_argument("--atol", type=non_negative_float, default=1e-4, help="logprobs agree this closely")
    ap.add_argument("--seed", type=non_negative_int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: qwen3_5-tiny, 2 short candidates, once")
    args = ap.parse_args()
    if args.smoke:
        args.models, args.candidates, args.context_len, args.candidate_len = ["qwen3_5-tiny"], 2, 16, 4
        args.gen_tokens, args.repeat, args.vocab = 2, 1, 100
    shape = Shape(args.candidates, args.context_len, args.candidate_len, args.gen_tokens, args.vocab)
    load_before = loads_now()
    results: dict[str, dict[str, object]] = {}
    print(
        f"{shape.candidates} candidates of {shape.context_len}+{shape.candidate_len} tokens "
        f"(gen: {shape.gen_tokens} tokens); medians of {args.repeat}; load {loads_text(load_before)}"
    )
    print(f"{'model':<18}{'door':<8}{'kind':<7}{'mode':<12}{'wall s':>8}{'spread':>15}{'cpu s':>8}"
          f"{'wall x':>8}{'cpu x':>7}  same")  # fmt: skip
    for model in args.models:
        for door in args.doors:
            vocab = min(args.vocab, plan_engine(EngineOptions(model=model)).choice.vocab_size)
            figures = DOORS[door](model, replace(shape, vocab=vocab), args)
            results.setdefault(model, {})[door] = {
                k: {m: asdict(f) for m, f in v.items()} for k, v in figures.items()
            }
            for kind, modes in figures.items():
                for mode, f in modes.items():
                    spread = f"{f.wall_min_s:.2f}-{f.wall_max_s:.2f}"
                    cpu_x = "-" if f.cpu_ratio is None else f"{f.cpu_ratio:.2f}"
                    print(f"{model:<18}{door:<8}{kind:<7}{mode:<12}{f.wall_s:>8.3f}{spread:>15}{f.cpu_s:>8.2f}"
                          f"{f.wall_ratio:>8.2f}{cpu_x:>7}  {f.same_as_batch}")  # fmt: skip
                print_paired(f"{model} {door} {kind}", modes)
    load_after = loads_now()
    print(f"load average before {loads_text(load_before)}, after {loads_text(load_after)}")
    if args.json is not None:  # its folder: made by write_figures
        out = {"shape": asdict(shape), "repeat": args.repeat, "torch_threads": args.torch_threads,
               "load_before": load_before, "load_after": load_after, "results": results}  # fmt: skip
        write_figures(args.json, out)


if __name__ == "__main__":
    main()
