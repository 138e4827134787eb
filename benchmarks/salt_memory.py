"""Server memory under requests that each name a new ``cache_salt`` (issue 28, item 1).

Starts `radixflow serve` as a process of its own on a loopback port, sends ``--requests``
completions from ``--clients`` concurrent connections, each with a cache salt no other request
uses, and reads the server process's resident memory (VmRSS) after the first ``--warmup`` answers
and after every ``--every`` more (the clients run in this process, so their memory is not
counted as the server's). Memory is flat when what each salt leaves behind is
bounded: the cache drops a namespace that holds nothing, and evicts the rest with their blocks.
Prints the figures and the cache's namespace count (``radixflow_cache_namespaces`` in /metrics);
writes JSON.

    python benchmarks/salt_memory.py --requests 10000 --json results/salt_memory.json
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from radixflow.bench.provenance import write_figures
from radixflow.cli.args import non_negative_int, positive_int
from radixflow.generation.setup import load_model
from radixflow.options import EngineOptions
from radixflow.server.serve import Server, build_server
from radixflow.server.spawn import serve_process
from radixflow.server.state import ServerConfig


@dataclass(frozen=True)
class Figures:
    requests: int
    warmup: int
    salt_bytes: int
    kv_blocks: int
    answered: int
    failed: int
    seconds: float
    rss_start_mb: float  # the server process's, once it answers
    rss_after_warmup_mb: float
    rss_end_mb: float
    rss_series_mb: list[float]  # after the warmup, then after every further ``--every`` requests
    growth_after_warmup_pct: float
    namespaces_end: float  # the cache's count once the last request is answered (/metrics)


def rss_mb(pid: int | str = "self") -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def start(options: EngineOptions) -> tuple[Server, threading.Thread, str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_server(load_model(options), ServerConfig(), "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit("the server did not start")
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{port}"


def spawn(options: EngineOptions) -> tuple[subprocess.Popen[str], str]:
    """`radixflow serve` in a process of its own on a loopback port: (process, base url)."""
    sizes = {
        "--kv-blocks": options.kv_blocks,
        "--state-slots": options.state_slots,
        "--token-budget": options.token_budget,
    }
    args = [options.model or "qwen3_5-tiny"] + [str(x) for pair in sizes.items() for x in pair]
    return serve_process(args, ready_s=60)


async def send(
    url: str, model: str, count: int, clients: int, salt_bytes: int, first: int = 0
) -> tuple[int, int]:
    """``count`` completions with unique salts from ``clients`` connections: (answered, failed)."""
    todo = iter(range(first, first + count))
    ok = failed = 0

    async def client() -> None:
        nonlocal ok, failed
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:
            for i in todo:
                salt = f"{i}-{uuid.uuid4().hex}".ljust(salt_bytes, "s")
                body = {"model": model, "prompt": f"Request {i} asks the server.", "max_tokens": 1}
                r = await http.post("/v1/completions", json={**body, "cache_salt": salt})
                ok, failed = (ok + 1, failed) if r.status_code == 200 else (ok, failed + 1)

    await asyncio.gather(*(client() for _ in range(clients)))
    return ok, failed


def namespaces_metric(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return float(next(x.split()[1] for x in text.splitlines() if x.startswith("radixflow_cache_namespaces ")))


def arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # no client, or no request, sends nothing: memory stays flat and the run reads as a pass
    ap.add_argument("--requests", type=positive_int, default=1500, help="requests in all (default 1500)")
    ap.add_argument("--warmup", type=non_negative_int, default=1000, help="memory is compared from here on")
    ap.add_argument("--every", type=positive_int, default=1000, help="memory is read after every this many")
    ap.add_argument("--clients", type=positive_int, default=8)
    ap.add_argument("--salt-bytes", type=positive_int, default=256, help="length of each cache salt")
    ap.add_argument("--model", default="qwen3_5-tiny")
    ap.add_argument("--kv-blocks", type=positive_int, default=256)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--smoke", action="store_true", help="CI: 40 requests from two clients")
    args = ap.parse_args()
    if args.smoke:
        args.requests, args.warmup, args.every, args.clients = 40, 20, 10, 2
    if not 0 < args.warmup < args.requests or args.every < 1:
        ap.error("--warmup must be between 0 and --requests, --every at least 1")
    return args


def drive(url: str, pid: int, args: argparse.Namespace) -> tuple[list[int], list[float]]:
    """Send the warm-up, then the rest ``args.every`` at a time, reading the server's RSS after
    each batch: (answered, failed) in all, and the RSS series from the end of the warm-up (MB)."""
    ok, bad = asyncio.run(send(url, args.model, args.warmup, args.clients, args.salt_bytes))
    counts, series = [ok, bad], [rss_mb(pid)]
    for done in range(args.warmup, args.requests, args.every):
        n = min(args.every, args.requests - done)
        ok, bad = asyncio.run(send(url, args.model, n, args.clients, args.salt_bytes, first=done))
        counts = [counts[0] + ok, counts[1] + bad]
        series.append(rss_mb(pid))
    return counts, series


def main() -> None:
    args = arguments()
    options = EngineOptions(model=args.model, kv_blocks=args.kv_blocks, state_slots=64, token_budget=256)
    proc, url = spawn(options)
    began = time.monotonic()
    try:
        rss_start = rss_mb(proc.pid)
        (answered, failed), series = drive(url, proc.pid, args)
        seconds = time.monotonic() - began
        metric = namespaces_metric(url)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
    rss_warm, rss_end = series[0], series[-1]
    figures = Figures(
        requests=args.requests,
        warmup=args.warmup,
        salt_bytes=args.salt_bytes,
        kv_blocks=args.kv_blocks,
        answered=answered,
        failed=failed,
        seconds=round(seconds, 1),
        rss_start_mb=round(rss_start, 1),
        rss_after_warmup_mb=round(rss_warm, 1),
        rss_end_mb=round(rss_end, 1),
        rss_series_mb=[round(x, 1) for x in series],
        growth_after_warmup_pct=round(100 * (rss_end - rss_warm) / rss_warm, 2),
        namespaces_end=metric,
    )
    for name, value in asdict(figures).items():
        print(f"{name:>24}: {value}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_figures(args.json, asdict(figures))


if __name__ == "__main__":
    main()
