"""A short completion while oversized bodies are in flight (issue 28, item 2).

Starts `radixflow serve`'s server in this process (a thread, on a loopback port, as the server
tests do) and times a 1-token completion from one client: on the idle server, then while
``--oversized`` other clients (processes of their own) have bodies in flight whose text
(``--body-mb`` megabytes) is longer than the model's context. Such a body used to hold a
tokenizer thread for seconds before it was refused as over the context; now its length refuses
it before tokenizing, and long bodies tokenize in their own lane. Two loads:

* ``burst``: for each timed completion, the oversized clients each send one body at once and the
  completion is sent while they are all uploading (the issue's "8 in flight");
* ``flood``: the oversized clients send bodies back to back for as long as completions are timed
  (hundreds of megabytes a second over loopback: the server's JSON parsing is then the limit).

Prints the median and worst latency of each and the ratio of medians to idle; writes JSON.
Acceptance (issue 28): within 2x of idle with 8 oversized bodies in flight.

    python benchmarks/oversized_bodies.py --json results/oversized_bodies.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from salt_memory import start

from radixflow.options import EngineOptions


@dataclass(frozen=True)
class Load:
    median_ms: float
    max_ms: float
    ratio: float  # median / the idle median
    oversized_answers: int
    oversized_statuses: list[int]


@dataclass(frozen=True)
class Figures:
    oversized: int
    body_mb: float
    samples: int
    idle_median_ms: float
    idle_max_ms: float
    burst: Load
    flood: Load


def short(http: httpx.Client, model: str, i: int) -> float:
    """Seconds for one 1-token completion."""
    began = time.perf_counter()
    r = http.post("/v1/completions", json={"model": model, "prompt": f"Ping {i}.", "max_tokens": 1})
    if r.status_code != 200:
        raise SystemExit(f"the short completion failed: {r.status_code} {r.text}")
    return time.perf_counter() - began


def sender(url: str, body: bytes, go: Any, sending: Any, statuses: Any, stop: Any, flood: bool) -> None:
    """Burst: one body each time ``go`` is released. Flood: bodies back to back until ``stop``.
    Puts each answer's status; releases ``sending`` as each body starts."""
    with httpx.Client(base_url=url, timeout=120) as http:
        while not stop.is_set():
            if not flood and not go.acquire(timeout=0.1):
                continue
            sending.release()
            r = http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
            statuses.put(r.status_code)


def load(
    url: str, body: bytes, args: argparse.Namespace, http: httpx.Client, idle: float, flood: bool
) -> Load:
    ctx = multiprocessing.get_context("spawn")
    go, sending, stop, statuses = ctx.Semaphore(0), ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=sender, args=(url, body, go, sending, statuses, stop, flood), daemon=True)
        for _ in range(args.oversized)
    ]
    seen: list[int] = []
    times = []
    try:
        for p in procs:
            p.start()
        for i in range(args.samples):
            if not flood:
                for _ in procs:
                    go.release()
            for _ in procs:  # every oversized body is on its way
                assert sending.acquire(timeout=300), "an oversized client never sent"
            times.append(short(http, args.model, i))
            if not flood:
                seen.extend(statuses.get(timeout=300) for _ in procs)
    finally:  # the clients stop even when a sample failed
        stop.set()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
    while not statuses.empty():
        seen.append(statuses.get())
    median = statistics.median(times)
    return Load(
        round(1000 * median, 2),
        round(1000 * max(times), 2),
        round(median / idle, 2),
        len(seen),
        sorted(set(seen)),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oversized", type=int, default=8, help="oversized bodies kept in flight")
    ap.add_argument("--body-mb", type=float, default=3.9, help="size of each oversized text (under 4 MiB)")
    ap.add_argument("--samples", type=int, default=20, help="short completions timed per load")
    ap.add_argument("--model", default="qwen3_5-tiny")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: two half-megabyte bodies, two samples")
    args = ap.parse_args()
    if args.smoke:
        args.oversized, args.body_mb, args.samples = 2, 0.5, 2
    options = EngineOptions(model=args.model, kv_blocks=256, state_slots=64, token_budget=256)
    server, thread, url = start(options)
    size = int(args.body_mb * (1 << 20))
    text = ("All work and no play. " * (size // 22 + 1))[:size]
    body = json.dumps({"model": args.model, "prompt": text, "max_tokens": 1}).encode()
    try:
        with httpx.Client(base_url=url, timeout=120) as http:
            for i in range(3):  # warm: the first rounds of a model cost more
                short(http, args.model, i)
            idle = [short(http, args.model, i) for i in range(args.samples)]
            idle_median = statistics.median(idle)
            burst = load(url, body, args, http, idle_median, flood=False)
            flood = load(url, body, args, http, idle_median, flood=True)
    finally:
        server.should_exit = True
        thread.join(60)
    figures = Figures(
        args.oversized,
        args.body_mb,
        args.samples,
        round(1000 * idle_median, 2),
        round(1000 * max(idle), 2),
        burst,
        flood,
    )
    for name, value in asdict(figures).items():
        print(f"{name:>16}: {value}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(asdict(figures), indent=2) + "\n")


if __name__ == "__main__":
    main()
