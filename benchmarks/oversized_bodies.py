"""A short completion while oversized bodies are in flight (issue 28, item 2).

Starts `radixflow serve`'s server in this process (a thread, on a loopback port, as the server
tests do) and times a 1-token completion from one client (a process of its own, as every client
here) while ``--oversized`` other clients have bodies in flight whose text (``--body-mb``
megabytes) is longer than the model's context. Such a body used to hold a tokenizer thread for
seconds before it was refused as over the context; now its length refuses it before tokenizing,
and long bodies tokenize in their own lane. Two loads:

* ``burst``: for each timed completion, the oversized clients each send one body at once and the
  completion is sent while they are all uploading (the issue's "8 in flight");
* ``flood``: the oversized clients send bodies back to back while the completion is timed
  (hundreds of megabytes a second over loopback: the server is then never idle).

Each loaded sample is paired with an idle one taken just after it, once every oversized body has
its answer, so a machine whose load drifts during the run (other work on its cores) shifts both
alike. Prints the median and worst latency of each and the ratio of medians to the interleaved
idle ones; writes JSON. Acceptance (issue 28): within 2x of idle with 8 oversized bodies in flight.

    python benchmarks/oversized_bodies.py --json results/oversized_bodies.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
from salt_memory import start

from radixflow.options import EngineOptions


@dataclass(frozen=True)
class Load:
    median_ms: float
    max_ms: float
    idle_median_ms: float  # the idle samples taken between this load's ones
    ratio: float  # median / idle_median
    oversized_answers: int
    oversized_statuses: list[int]


@dataclass(frozen=True)
class Figures:
    oversized: int
    body_mb: float
    samples: int
    idle_median_ms: float  # before any load
    idle_max_ms: float
    burst: Load
    flood: Load


def timer(url: str, model: str, conn: Connection) -> None:
    """The short client: for each number received, one 1-token completion; sends back its
    seconds, or the failure as text. Stops at None."""
    with httpx.Client(base_url=url, timeout=120) as http:
        while (i := conn.recv()) is not None:
            began = time.perf_counter()
            body = {"model": model, "prompt": f"Ping {i}.", "max_tokens": 1}
            r = http.post("/v1/completions", json=body)
            took = time.perf_counter() - began
            conn.send(took if r.status_code == 200 else f"{r.status_code} {r.text}")


def short(conn: Connection, i: int) -> float:
    """Seconds for one 1-token completion, timed by the short client."""
    conn.send(i)
    took = conn.recv()
    if isinstance(took, str):
        raise SystemExit(f"the short completion failed: {took}")
    return took


def sender(url: str, body: bytes, sync: dict[str, Any], flood: bool) -> None:
    """Burst: one body each time ``go`` is released. Flood: bodies back to back while ``run`` is
    set; once it is cleared (and ``pause`` counts one more), ``parked`` is released when this
    client's last body is answered. Puts each answer's status; releases ``sending`` as each body
    starts."""
    parked = 0  # the pause this client last reported
    with httpx.Client(base_url=url, timeout=120) as http:
        while not sync["stop"].is_set():
            if flood and not sync["run"].wait(0.05):
                if parked != sync["pause"].value:
                    parked = sync["pause"].value
                    sync["parked"].release()
                continue
            if not flood and not sync["go"].acquire(timeout=0.1):
                continue
            sync["sending"].release()
            r = http.post("/v1/completions", content=body, headers={"content-type": "application/json"})
            sync["statuses"].put(r.status_code)


def load(url: str, body: bytes, args: argparse.Namespace, conn: Connection, flood: bool) -> Load:
    ctx = multiprocessing.get_context("spawn")
    sync = {
        "go": ctx.Semaphore(0),
        "sending": ctx.Semaphore(0),
        "parked": ctx.Semaphore(0),
        "run": ctx.Event(),
        "pause": ctx.Value("i", 0),
        "stop": ctx.Event(),
        "statuses": ctx.Queue(),
    }
    procs = [
        ctx.Process(target=sender, args=(url, body, sync, flood), daemon=True) for _ in range(args.oversized)
    ]
    seen: list[int] = []
    times, idle = [], []
    try:
        for p in procs:
            p.start()
        for i in range(args.samples):
            if flood:
                sync["run"].set()
            else:
                for _ in procs:
                    sync["go"].release()
            for _ in range(len(procs) * (2 if flood else 1)):  # every oversized client is sending
                assert sync["sending"].acquire(timeout=300), "an oversized client never sent"
            times.append(short(conn, i))
            if flood:  # every client stops, its last body answered
                sync["run"].clear()
                sync["pause"].value += 1
                for _ in procs:
                    assert sync["parked"].acquire(timeout=300), "an oversized client never stopped"
                while sync["sending"].acquire(block=False):
                    pass
                while not sync["statuses"].empty():
                    seen.append(sync["statuses"].get())
            else:
                seen.extend(sync["statuses"].get(timeout=300) for _ in procs)
            idle.append(short(conn, i))  # nothing in flight now
    finally:  # the clients stop even when a sample failed
        sync["stop"].set()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
    while not sync["statuses"].empty():
        seen.append(sync["statuses"].get())
    median, idle_median = statistics.median(times), statistics.median(idle)
    return Load(
        round(1000 * median, 2),
        round(1000 * max(times), 2),
        round(1000 * idle_median, 2),
        round(median / idle_median, 2),
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
    ctx = multiprocessing.get_context("spawn")
    conn, theirs = ctx.Pipe()
    client = ctx.Process(target=timer, args=(url, args.model, theirs), daemon=True)
    client.start()
    try:
        for i in range(3):  # warm: the first rounds of a model cost more
            short(conn, i)
        idle = [short(conn, i) for i in range(args.samples)]
        burst = load(url, body, args, conn, flood=False)
        flood = load(url, body, args, conn, flood=True)
    finally:
        conn.send(None)
        client.join(60)
        server.should_exit = True
        thread.join(60)
    figures = Figures(
        args.oversized,
        args.body_mb,
        args.samples,
        round(1000 * statistics.median(idle), 2),
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
