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
idle ones (and sample by sample: each over its idle one, [min, median, max]), the machine's
load average, and the CPU seconds each party spent per oversized body (the server's event-loop
thread, the oversized clients); writes JSON. Acceptance (issue 28): within 2x of idle with 8
oversized bodies in flight.

The oversized clients send a request they were handed as bytes (headers and body, encoded once)
over a plain socket, so they cost the shared cores little beside the server; their processes
import nothing heavy (this module's top level is light: each spawned process imports it).
``--sink`` also runs each load against a null sink (a process of its own that reads each body
and answers 400, nothing else) while the short completion still goes to the server: the part of
the ratio that the uploads themselves (clients, loopback copies, reading) cost on these cores,
whatever the server does with the bodies.

    python benchmarks/oversized_bodies.py --sink --json results/oversized_bodies.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import threading
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from radixflow.bench.oversized_clients import listening, post_bytes, sender, sender_sync, short, sink, timer
from radixflow.bench.provenance import write_figures
from radixflow.bench.spread import load_now

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    target: str  # where the oversized bodies went: "server", or "sink" (--sink)
    load_average: float | None  # the machine's 1-minute load average as this load began
    median_ms: float
    max_ms: float
    idle_median_ms: float  # the idle samples taken between this load's ones
    ratio: float  # median / idle_median
    ratio_paired: list[float]  # each sample over its idle one, taken just after: [min, median, max]
    oversized_answers: int
    oversized_statuses: list[int]
    loop_cpu_ms_per_body: float  # the server's event-loop thread (the sink's process, for a sink)
    clients_cpu_ms_per_body: float  # the oversized clients' processes


@dataclass(frozen=True)
class Figures:
    oversized: int
    body_mb: float
    samples: int
    idle_median_ms: float  # before any load
    idle_max_ms: float
    burst: Load
    flood: Load
    burst_sink: Load | None  # --sink
    flood_sink: Load | None


def cpu_s(path: str) -> float:
    """User plus system CPU seconds of a process or thread, from its ``/proc/.../stat``."""
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def load(
    port: int, loop_stat: str, body: bytes, args: argparse.Namespace, conn: Connection, flood: bool
) -> Load:
    """The short completion timed while ``args.oversized`` clients send ``body`` to ``port``;
    ``loop_stat``: the /proc stat file of whatever reads those bodies (its CPU is counted)."""
    ctx = multiprocessing.get_context("spawn")
    sync = sender_sync(ctx)
    request = post_bytes(body)
    procs = [
        ctx.Process(target=sender, args=(port, request, sync, flood), daemon=True)
        for _ in range(args.oversized)
    ]
    seen: list[int] = []
    times, idle = [], []
    load_average = load_now()
    loop_cpu = cpu_s(loop_stat)
    try:
        for p in procs:
            p.start()
        for i in range(args.samples):
            times.append(loaded(conn, i, sync, len(procs), flood))
            seen.extend(answered(sync, len(procs), flood))
            idle.append(short(conn, i))  # nothing in flight now
    finally:  # the clients stop even when a sample failed
        sync["stop"].set()
        for p in procs:
            p.join(120)
            if p.is_alive():
                p.kill()
    loop_cpu, clients_cpu = cpu_s(loop_stat) - loop_cpu, sync["cpu"].value
    while not sync["statuses"].empty():
        seen.append(sync["statuses"].get())
    median, idle_median = statistics.median(times), statistics.median(idle)
    per_body = 1000 / max(1, len(seen))
    return Load(
        "server" if loop_stat.startswith("/proc/self/") else "sink",
        None if load_average is None else round(load_average, 2),
        round(1000 * median, 2),
        round(1000 * max(times), 2),
        round(1000 * idle_median, 2),
        round(median / idle_median, 2),
        [round(r, 2) for r in paired_ratio(times, idle)],
        len(seen),
        sorted(set(seen)),
        round(loop_cpu * per_body, 2),
        round(clients_cpu * per_body, 2),
    )


def paired_ratio(times: list[float], idle: list[float]) -> list[float]:
    """Each loaded sample over the idle one taken just after it (the two under one load), their
    [min, median, max]: what the ratio of the medians is read against. [] where no idle sample
    took a measurable time."""
    ratios = [t / i for t, i in zip(times, idle, strict=True) if i > 0]
    return [min(ratios), statistics.median(ratios), max(ratios)] if ratios else []


def loaded(conn: Connection, i: int, sync: dict[str, Any], clients: int, flood: bool) -> float:
    """Seconds for the short completion ``i`` once every oversized client is sending."""
    if flood:
        sync["run"].set()
    else:
        for _ in range(clients):
            sync["go"].release()
    for _ in range(clients * (2 if flood else 1)):  # every oversized client is sending
        assert sync["sending"].acquire(timeout=300), "an oversized client never sent"
    return short(conn, i)


def answered(sync: dict[str, Any], clients: int, flood: bool) -> list[int]:
    """The statuses of the bodies sent for one sample, once each is answered (a flood's clients
    stopped first, each with its last body answered)."""
    if not flood:
        return [sync["statuses"].get(timeout=300) for _ in range(clients)]
    sync["run"].clear()
    sync["pause"].value += 1
    for _ in range(clients):
        assert sync["parked"].acquire(timeout=300), "an oversized client never stopped"
    while sync["sending"].acquire(block=False):
        pass
    seen = []
    while not sync["statuses"].empty():
        seen.append(sync["statuses"].get())
    return seen


def arguments() -> argparse.ArgumentParser:
    """The command line."""
    from radixflow.cli.args import positive_float, positive_int

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # no oversized client (or an empty body) loads nothing: the ratio to idle reads as a pass
    ap.add_argument("--oversized", type=positive_int, default=8, help="oversized bodies kept in flight")
    ap.add_argument(
        "--body-mb", type=positive_float, default=3.9, help="size of each oversized text (under 4 MiB)"
    )
    # before the server starts: no sample leaves no median
    ap.add_argument("--samples", type=positive_int, default=20, help="short completions timed per load")
    ap.add_argument("--model", default="qwen3_5-tiny")
    ap.add_argument("--sink", action="store_true", help="each load against a null sink as well, interleaved")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: two half-megabyte bodies, two samples")
    return ap


def measured(
    args: argparse.Namespace, server: Any, thread: threading.Thread, url: str
) -> tuple[list[float], dict[str, Load]]:
    """The idle samples and each load (against the server at ``url``, and the null sink with
    ``--sink``); the server stopped however it ends."""
    port = int(url.rsplit(":", 1)[1])
    loop_stat = f"/proc/self/task/{thread.native_id}/stat"  # the server's event loop runs there
    size = int(args.body_mb * (1 << 20))
    text = ("All work and no play. " * (size // 22 + 1))[:size]
    body = json.dumps({"model": args.model, "prompt": text, "max_tokens": 1}).encode()
    ctx = multiprocessing.get_context("spawn")
    conn, theirs = ctx.Pipe()
    client = ctx.Process(target=timer, args=(url, args.model, theirs), daemon=True)
    sink_sock = listening()
    sinker = ctx.Process(target=sink, args=(sink_sock,), daemon=True) if args.sink else None
    client.start()
    loads: dict[str, Load] = {}
    try:
        if sinker is not None:
            sinker.start()
        for i in range(3):  # warm: the first rounds of a model cost more
            short(conn, i)
        idle = [short(conn, i) for i in range(args.samples)]
        for flood in (False, True):
            name = "flood" if flood else "burst"
            loads[name] = load(port, loop_stat, body, args, conn, flood)
            if sinker is not None:
                sink_port, sink_stat = sink_sock.getsockname()[1], f"/proc/{sinker.pid}/stat"
                loads[f"{name}_sink"] = load(sink_port, sink_stat, body, args, conn, flood)
    finally:
        conn.send(None)
        client.join(60)
        if sinker is not None:
            sinker.kill()
        server.should_exit = True
        thread.join(60)
    return idle, loads


def main() -> None:
    from salt_memory import start  # heavy (torch): here, not at the top, which every client imports

    from radixflow.options import EngineOptions

    args = arguments().parse_args()
    if args.smoke:
        args.oversized, args.body_mb, args.samples = 2, 0.5, 2
    options = EngineOptions(model=args.model, kv_blocks=256, state_slots=64, token_budget=256)
    server, thread, url = start(options)
    idle, loads = measured(args, server, thread, url)
    figures = Figures(
        args.oversized,
        args.body_mb,
        args.samples,
        round(1000 * statistics.median(idle), 2),
        round(1000 * max(idle), 2),
        loads["burst"],
        loads["flood"],
        loads.get("burst_sink"),
        loads.get("flood_sink"),
    )
    for name, value in asdict(figures).items():
        print(f"{name:>16}: {value}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, asdict(figures))


if __name__ == "__main__":
    main()
