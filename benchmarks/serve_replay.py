"""`serve_load.py`'s traffic straight into one engine, no HTTP: where a server round's CPU goes.

A closed loop of ``--clients`` virtual clients, each with one request in flight; when a request
is answered its client sends the next one at once (the same mix as serve_load: candidate
scoring with echo + logprobs=1 and max_tokens 0 or 1 after one of 8 shared contexts, or a chat
turn of 16 sampled tokens). Prints the round composition, requests/s, and the engine thread's
CPU, run-queue wait (CPU other jobs held) and sleep (the GIL) from ``/proc``, so a run on a busy
machine still says how much CPU a request costs, beside the machine's 1-minute load average
before and after. ``--profile`` adds cProfile's top functions.

    python benchmarks/serve_replay.py --rounds 40 [--profile] [--matmul PLAN]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from radixflow.bench.provenance import write_figures
from radixflow.bench.serve_clients import make_traffic
from radixflow.bench.spread import load_now, load_text
from radixflow.cli.args import non_negative_int, positive_int
from radixflow.generation.output_processor import Done, EngineDriver, OutputProcessor
from radixflow.generation.params import SamplingParams
from radixflow.generation.setup import LoadedModel, load_model
from radixflow.generation.tracker import RequestTracker
from radixflow.options import EngineOptions
from radixflow.problems import ProblemError
from radixflow.scheduler.request import Request

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, run as a script
from scheduler_overhead import machine


def thread_times() -> tuple[float, float, float]:
    """(wall, CPU, run-queue wait) of the calling thread so far, in seconds (Linux)."""
    tid = threading.get_native_id()
    cpu, wait, _ = Path(f"/proc/self/task/{tid}/schedstat").read_text().split()
    return time.perf_counter(), int(cpu) / 1e9, int(wait) / 1e9


class Clients:
    """The virtual clients: each one's next request, drawn as serve_load draws them."""

    def __init__(self, model: object, engine: object, count: int) -> None:
        self.tok = model.tokenizer  # type: ignore[attr-defined]
        self.processor = OutputProcessor(engine)  # type: ignore[arg-type]
        self.engine = engine
        # serve_load's texts (its defaults: 8 contexts of 12 sentences, 16 answers)
        texts = make_traffic("", 8, 16, 12, chat_share=0.25, chat_tokens=16)
        self.contexts, self.candidates = texts.contexts, texts.candidates
        self.rngs = [random.Random(i) for i in range(count)]
        self.owner: dict[str, int] = {}
        self.serial = 0

    def send(self, client: int) -> None:
        rng = self.rngs[client]
        self.serial += 1
        if rng.random() < 0.25:
            question = rng.choice(self.candidates).removeprefix(" Answer: ")
            text = self.tok.chat.render([{"role": "user", "content": f"Explain: {question}"}], True)
            ids = self.tok.encode(text, add_special_tokens=False)
            params = SamplingParams(max_tokens=16, temperature=1.0, ignore_eos=True)
        else:
            ids = self.tok.encode(rng.choice(self.contexts) + rng.choice(self.candidates), True)
            params = SamplingParams(
                max_tokens=rng.choice([0, 1]), temperature=0.0, logprobs=1, prompt_logprobs=1
            )
        req = Request(f"r{self.serial}", tuple(ids), "default", sampling=params)
        req.arrival_s = self.engine.now  # type: ignore[attr-defined]
        self.owner[req.id] = client
        self.processor.submit(RequestTracker(req, self.tok), stream=params.max_tokens > 1)

    def run(self, rounds: int) -> int:
        """Step ``rounds`` rounds; every answered client sends again. Returns requests answered."""
        driver = EngineDriver(self.engine, self.processor)  # type: ignore[arg-type]
        done = 0
        for _ in range(rounds):
            for event in driver.step():
                if isinstance(event, Done):
                    done += 1
                    self.send(self.owner.pop(event.request_id))
        return done


def round_figures(history: Sequence[Any], start: int) -> dict[str, float | None]:
    """The composition of the rounds ``history`` gained from index ``start`` on (None: no round).

    Not its last ``--rounds`` entries: a step that ran no round, or a round that failed (kept in
    failed_rounds), would bring fill rounds in."""
    rounds = list(history)[start:]
    mean = statistics.mean if rounds else lambda _: None
    return {
        "rounds": len(rounds),
        "prefill_tokens_per_round": mean(
            [sum(hi - lo for _, lo, hi in r.chunks if hi - lo > 1) for r in rounds]
        ),
        "decode_rows_per_round": mean([sum(1 for _, lo, hi in r.chunks if hi - lo == 1) for r in rounds]),
        "chunks_per_round": mean([len(r.chunks) for r in rounds]),
    }


def arguments() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--clients", type=positive_int, default=64)
    ap.add_argument("--rounds", type=positive_int, default=40, help="rounds measured (after the --fill ones)")
    ap.add_argument("--threads", type=positive_int, default=1, help="torch threads")
    ap.add_argument("--matmul", default="auto", help="the engine's GEMM plan, e.g. prefill=onednn")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--fill", type=non_negative_int, default=20, help="rounds run before the measured ones")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--smoke", action="store_true", help="CI: qwen3_5-tiny, four clients, a few rounds")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.clients, args.rounds, args.fill = "qwen3_5-tiny", 4, 5, 3
    return ap, args


def measure(model: LoadedModel, args: argparse.Namespace) -> tuple[dict, cProfile.Profile | None]:
    """Fill the engine with ``args.clients`` clients, run ``args.fill`` rounds, then time
    ``args.rounds`` more: the figures, and the profile of the timed rounds where asked for."""
    engine = model.engine()
    load_before = load_now()
    clients = Clients(model, engine, args.clients)
    for i in range(args.clients):
        clients.send(i)
    clients.run(args.fill)
    profile = cProfile.Profile() if args.profile else None
    start = len(engine.rounds)  # the history is unbounded here (round_history None)
    before = thread_times()
    if profile:
        profile.enable()
    done = clients.run(args.rounds)
    if profile:
        profile.disable()
    after = thread_times()
    wall, cpu, queued = (b - a for a, b in zip(before, after, strict=True))
    mix = round_figures(engine.rounds, start)
    rounds = mix["rounds"]
    figures = {
        **mix,
        "requests": done,
        "requests_per_s": done / wall,
        "ms_per_round": 1e3 * wall / rounds if rounds else None,
        "engine_cpu_ms_per_request": 1e3 * cpu / done if done else None,
        "wall_s": wall,
        "cpu_s": cpu,
        "run_queue_s": queued,
        "machine": machine(load_before),
    }
    return figures, profile


def report(figures: dict) -> None:
    m, rounds, done = figures["machine"], figures["rounds"], figures["requests"]
    wall, cpu, queued = figures["wall_s"], figures["cpu_s"], figures["run_queue_s"]
    print(
        f"{m['cpus']} CPUs, load average (1 min) {load_text(m['load_1min_before'])} before,"
        f" {load_text(m['load_1min_after'])} after"
    )
    if rounds:
        print(
            f"per round: {figures['prefill_tokens_per_round']:.0f} prefill tokens, "
            f"{figures['decode_rows_per_round']:.0f} decode rows, {figures['chunks_per_round']:.0f} chunks"
        )
    per_request = "n/a" if not done else f"{1e3 * cpu / done:.1f} ms"
    per_round = "n/a" if not rounds else f"{figures['ms_per_round']:.0f} ms"
    print(
        f"{rounds} rounds, {done} requests: {done / wall:.1f} requests/s, "
        f"{per_round} per round; engine thread CPU {per_request} per request "
        f"(wall {wall:.1f} s = CPU {cpu:.1f} + run queue {queued:.1f} + asleep {wall - cpu - queued:.1f})"
    )


def main() -> None:
    ap, args = arguments()
    torch.set_num_threads(args.threads)
    try:
        options = EngineOptions.from_mapping(
            # radixflow: the policy docs/serving.md's figures were measured under (adaptive: the default now)
            {"kv_blocks": 4096, "max_requests": args.clients, "matmul": args.matmul, "policy": "radixflow"},
            model=args.model,
        )
        model = load_model(options)
    except ProblemError as e:  # an unknown model or matmul plan: one line, as radixflow's own flags
        ap.error(str(e))
    figures, profile = measure(model, args)
    report(figures)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config = vars(args) | {"json": str(args.json)}
        write_figures(args.json, {"config": config, **figures})
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
