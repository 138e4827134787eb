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
idle ones, the machine's load average, and the CPU seconds each party spent per oversized body
(the server's event-loop thread, the oversized clients); writes JSON. Acceptance (issue 28):
within 2x of idle with 8 oversized bodies in flight.

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
import socket
import statistics
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Load:
    target: str  # where the oversized bodies went: "server", or "sink" (--sink)
    load_average: float  # the machine's 1-minute load average as this load began
    median_ms: float
    max_ms: float
    idle_median_ms: float  # the idle samples taken between this load's ones
    ratio: float  # median / idle_median
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


def post_bytes(body: bytes) -> bytes:
    """A whole ``POST /v1/completions`` request with ``body``, as sent on the wire."""
    head = (
        "POST /v1/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def answer_status(sock: socket.socket) -> int:
    """Reads one answer (with a Content-Length, as every one here has) off ``sock``: its status."""
    got = b""
    while b"\r\n\r\n" not in got:
        piece = sock.recv(1 << 16)
        if not piece:
            raise ConnectionError("the server closed the connection")
        got += piece
    head, rest = got.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    length = next(int(x.split(b":")[1]) for x in lines if x.lower().startswith(b"content-length:"))
    while len(rest) < length:
        rest += sock.recv(1 << 16)
    return int(lines[0].split()[1])


def sender(port: int, request: bytes, sync: dict[str, Any], flood: bool) -> None:
    """Burst: one request each time ``go`` is released. Flood: requests back to back while ``run``
    is set; once it is cleared (and ``pause`` counts one more), ``parked`` is released when this
    client's last body is answered. Puts each answer's status; releases ``sending`` as each body
    starts; adds the CPU seconds it spent from here on to ``cpu`` (its start-up is not counted)."""
    parked = 0  # the pause this client last reported
    began = time.process_time()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while not sync["stop"].is_set():
            if flood and not sync["run"].wait(0.05):
                if parked != sync["pause"].value:
                    parked = sync["pause"].value
                    sync["parked"].release()
                continue
            if not flood and not sync["go"].acquire(timeout=0.1):
                continue
            sync["sending"].release()
            sock.sendall(request)
            sync["statuses"].put(answer_status(sock))
    with sync["cpu"].get_lock():
        sync["cpu"].value += time.process_time() - began


async def sink_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A null sink: reads each request's body whole and answers 400, doing nothing else."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks = []
    while (message := await receive())["type"] == "http.request":
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    b"".join(chunks)  # as a server that parses it would
    headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


def sink(sock: socket.socket) -> None:
    import uvicorn  # in the sink's process only

    uvicorn.Server(uvicorn.Config(sink_app, log_level="warning", access_log=False)).run(sockets=[sock])


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
    sync = {
        "go": ctx.Semaphore(0),
        "sending": ctx.Semaphore(0),
        "parked": ctx.Semaphore(0),
        "run": ctx.Event(),
        "pause": ctx.Value("i", 0),
        "cpu": ctx.Value("d", 0.0),
        "stop": ctx.Event(),
        "statuses": ctx.Queue(),
    }
    request = post_bytes(body)
    procs = [
        ctx.Process(target=sender, args=(port, request, sync, flood), daemon=True)
        for _ in range(args.oversized)
    ]
    seen: list[int] = []
    times, idle = [], []
    load_average = os.getloadavg()[0]
    loop_cpu = cpu_s(loop_stat)
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
    loop_cpu, clients_cpu = cpu_s(loop_stat) - loop_cpu, sync["cpu"].value
    while not sync["statuses"].empty():
        seen.append(sync["statuses"].get())
    median, idle_median = statistics.median(times), statistics.median(idle)
    per_body = 1000 / max(1, len(seen))
    return Load(
        "server" if loop_stat.startswith("/proc/self/") else "sink",
        round(load_average, 2),
        round(1000 * median, 2),
        round(1000 * max(times), 2),
        round(1000 * idle_median, 2),
        round(median / idle_median, 2),
        len(seen),
        sorted(set(seen)),
        round(loop_cpu * per_body, 2),
        round(clients_cpu * per_body, 2),
    )


def listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    return sock


def main() -> None:
    from salt_memory import start  # heavy (torch): here, not at the top, which every client imports

    from radixflow.cli.args import positive_float, positive_int
    from radixflow.options import EngineOptions

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
    args = ap.parse_args()
    if args.smoke:
        args.oversized, args.body_mb, args.samples = 2, 0.5, 2
    options = EngineOptions(model=args.model, kv_blocks=256, state_slots=64, token_budget=256)
    server, thread, url = start(options)
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
        args.json.write_text(json.dumps(asdict(figures), indent=2) + "\n")


if __name__ == "__main__":
    main()
