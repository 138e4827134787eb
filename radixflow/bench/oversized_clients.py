"""The processes of benchmarks/oversized_bodies.py's loads, each spawned on its own: the short
client (one 1-token completion per number it is sent, timed), the oversized senders (a request
handed to them as bytes, sent over a plain socket: they cost the shared cores little beside the
server) with the primitives that pace them, and the null sink (reads each body whole, answers 400).

Every spawned process imports this module: nothing heavy at its top level.
"""

from __future__ import annotations

import socket
import time
from multiprocessing.connection import Connection
from typing import Any

import httpx


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


def sender_sync(ctx: Any) -> dict[str, Any]:
    """The primitives (of the multiprocessing context ``ctx``) the senders are paced by and report
    to; `sender` says what each one means."""
    return {
        "go": ctx.Semaphore(0),
        "sending": ctx.Semaphore(0),
        "parked": ctx.Semaphore(0),
        "run": ctx.Event(),
        "pause": ctx.Value("i", 0),
        "cpu": ctx.Value("d", 0.0),
        "stop": ctx.Event(),
        "statuses": ctx.Queue(),
    }


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
                parked = _parked(sync, parked)
                continue
            if not flood and not sync["go"].acquire(timeout=0.1):
                continue
            sync["sending"].release()
            sock.sendall(request)
            sync["statuses"].put(answer_status(sock))
    with sync["cpu"].get_lock():
        sync["cpu"].value += time.process_time() - began


def _parked(sync: dict[str, Any], parked: int) -> int:
    """A paused flood's client, its last body answered: ``parked`` released once for each new
    pause; returns the pause it has now reported."""
    if parked != sync["pause"].value:
        parked = sync["pause"].value
        sync["parked"].release()
    return parked


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


def listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    return sock
