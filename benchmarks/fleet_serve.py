"""Two engine replicas on Ray Serve, one router after another, under the official openai client.

For each router (``--routers``, pow2 first), starts ``radixflow serve MODEL --replicas N --router R``
in its own process, then sends candidate-scoring traffic from ``--clients`` concurrent clients
(`openai.AsyncOpenAI`): ``--groups`` shared contexts of ``--context`` token ids, each followed by
``--candidates`` candidates of ``--candidate`` tokens. Requests rotate over three kinds: plain
completions, streamed completions, and ``echo`` with ``logprobs=1``. Counts: answers, lost
requests (any exception or an answer without its choice), the fleet's reuse (prompt tokens served
from a replica's cache, from the server's ``/fleet`` figures). Finally Ctrl-C (SIGINT) with
requests in flight: they must all be answered (drained) and the server (with the status 130 of a
Ctrl-C) and every Ray process it started must exit.

Needs the cluster extra (ray[serve]).

    python benchmarks/fleet_serve.py --json results/fleet_serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai

from radixflow.cli.args import float_arg, int_arg, positive_int
from radixflow.fleet import router_problem

FIRST_ID = 4  # token ids are drawn from here up: past the model's special ids
INTERRUPTED = 130  # the CLI's exit status after a Ctrl-C, once it drained (another: it failed)


@dataclass
class RouterRun:
    router: str
    requests: int = 0
    answered: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    mean_latency_s: float | None = None  # None: no request answered, no latency to average
    reuse_rate: float | None = None
    per_replica: dict[str, Any] = field(default_factory=dict)
    drain_answered: int = 0
    drain_sent: int = 0
    exit_code: int | None = None
    stopped_s: float | None = None
    ray_processes_left: int | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_processes(ray_dir: str) -> int:
    """This run's Ray processes: those whose session lives under ``ray_dir`` (the server's
    ``RAY_TMPDIR``), whatever other Ray instances share the machine (another run's, a test's)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    ours = (line for line in out.splitlines() if f"{ray_dir}/" in line)
    return sum(("raylet" in line or "gcs_server" in line) for line in ours)


def start(model: str, replicas: int, router: str, port: int, log: Path, ray_dir: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "radixflow.cli", "serve", model, "--replicas", str(replicas)]
    cmd += ["--router", router, "--port", str(port), "--log-level", "warning"]
    cmd += ["--policy", "radixflow"]  # the policy of docs/fleet.md's figures (adaptive is the default now)
    env = {**os.environ, "RAY_TMPDIR": ray_dir}  # its Ray session under a directory of its own
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def wait_ready(proc: subprocess.Popen, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s")


def workload(args: argparse.Namespace) -> list[list[int]]:
    rng = random.Random(args.seed)
    draw = lambda n: [rng.randrange(FIRST_ID, args.vocab) for _ in range(n)]  # noqa: E731
    prompts = [ctx + draw(args.candidate) for ctx in (draw(args.context) for _ in range(args.groups))
               for _ in range(args.candidates)]  # fmt: skip
    return prompts  # grouped: a context's candidates arrive together, as a harness sends them


async def one(client: openai.AsyncOpenAI, model: str, prompt: list[int], kind: int) -> None:
    """One request of kind 0 (plain), 1 (streamed) or 2 (echo + logprobs); raises unless answered."""
    if kind == 1:
        stream = await client.completions.create(model=model, prompt=prompt, max_tokens=4, stream=True)
        finish = [
            c.choices[0].finish_reason async for c in stream if c.choices and c.choices[0].finish_reason
        ]
        if len(finish) != 1:
            raise RuntimeError(f"a stream ended with {len(finish)} finish reasons")
        return
    echo = kind == 2
    r = await client.completions.create(
        model=model, prompt=prompt, max_tokens=1 if echo else 4, echo=echo, logprobs=1 if echo else None
    )
    if not r.choices:
        raise RuntimeError("an answer without a choice")
    if echo and len(r.choices[0].logprobs.token_logprobs) != len(prompt) + 1:
        raise RuntimeError("echo logprobs do not cover the prompt")


async def drive(port: int, model: str, prompts: list[list[int]], clients: int, run: RouterRun) -> None:
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                timeout=600)  # fmt: skip
    queue: asyncio.Queue = asyncio.Queue()
    for i, p in enumerate(prompts):
        queue.put_nowait((i, p))
    latencies: list[float] = []

    async def worker() -> None:
        while not queue.empty():
            i, prompt = queue.get_nowait()
            t0 = time.monotonic()
            try:
                await one(client, model, prompt, i % 3)
                run.answered += 1
                latencies.append(time.monotonic() - t0)
            except Exception as e:
                run.lost += 1
                run.errors.append(f"{type(e).__name__}: {e}"[:200])

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(clients)))
    run.wall_s = time.monotonic() - t0
    run.requests = len(prompts)
    run.mean_latency_s = sum(latencies) / len(latencies) if latencies else None
    await client.close()


async def interrupt_mid_flight(proc: subprocess.Popen, port: int, model: str, prompts: list[list[int]],
                               run: RouterRun) -> None:  # fmt: skip
    """Ctrl-C with requests in flight: every one is answered (drained), then the server exits."""
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                timeout=120)  # fmt: skip
    tasks = [asyncio.ensure_future(one(client, model, p, 0)) for p in prompts]
    await accepted(port, tasks)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    run.drain_sent = len(tasks)
    run.drain_answered = sum(r is None for r in results)
    run.errors += [f"drain: {type(r).__name__}: {r}"[:200] for r in results if r is not None]
    run.exit_code = await asyncio.to_thread(proc.wait, 120)
    run.stopped_s = time.monotonic() - t0
    await client.close()


async def accepted(port: int, tasks: list[asyncio.Future], timeout_s: float = 120.0) -> None:
    """Wait until the server has accepted every one of ``tasks``' requests: those not answered yet
    are held (its pending gauge), so the Ctrl-C finds them in flight however slowly a loaded
    machine lets them arrive."""
    n = len(tasks)
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient() as http:
        while time.monotonic() < deadline:
            text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
            line = next((x for x in text.splitlines() if x.startswith("radixflow_requests_pending ")), "")
            if line and float(line.split()[1]) + sum(t.done() for t in tasks) >= n:
                return
            await asyncio.sleep(0.02)
    raise RuntimeError(f"the server did not hold {n} requests within {timeout_s:.0f} s")


def ray_settled(ray_dir: str, timeout_s: float = 120.0) -> int:
    """This run's Ray processes left, once they stop shutting down (or at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while (left := ray_processes(ray_dir)) > 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def started(args: argparse.Namespace, router: str, log: Path, ray_dir: str) -> tuple[subprocess.Popen, int]:
    """The server, ready; a port Ray's own processes took meanwhile is tried again elsewhere."""
    for attempt in range(3):
        port = free_port()
        proc = start(args.model, args.replicas, router, port, log, ray_dir)
        try:
            wait_ready(proc, port, args.start_timeout)
            return proc, port
        except RuntimeError:
            if proc.poll() is None or attempt == 2 or "address already in use" not in log.read_text():
                proc.kill()
                proc.wait()  # reaped: its Ray processes (fate-shared) go with it
                raise
            time.sleep(5)  # its Ray instance shuts down first
    raise AssertionError("unreachable")


def one_router(args: argparse.Namespace, router: str, prompts: list[list[int]]) -> RouterRun:
    log = Path(args.log_dir) / f"fleet_serve_{router}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # short: Ray's socket paths under it must stay within the 107 bytes a Unix socket allows
    ray_dir = tempfile.mkdtemp(prefix="rf-ray-", dir="/tmp")
    try:  # removed however the run ends: a server that never got ready included
        return measured(args, router, prompts, log, ray_dir)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


def measured(
    args: argparse.Namespace, router: str, prompts: list[list[int]], log: Path, ray_dir: str
) -> RouterRun:
    """One router's run with its Ray session under ``ray_dir``."""
    run = RouterRun(router)
    proc, port = started(args, router, log, ray_dir)
    try:
        asyncio.run(drive(port, args.model, prompts, args.clients, run))
        fleet = httpx.get(f"http://127.0.0.1:{port}/fleet", timeout=10).json()
        run.per_replica = fleet["replicas"]
        prompt = sum(f["prompt_tokens"] for f in fleet["replicas"].values())
        reused = sum(f["reused_tokens"] for f in fleet["replicas"].values())
        run.reuse_rate = reused / prompt if prompt else None
        asyncio.run(interrupt_mid_flight(proc, port, args.model, prompts[: args.clients], run))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run.ray_processes_left = ray_settled(ray_dir)
    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3_5-tiny")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--routers", default="pow2,prefix,checkpoint")
    # counts below 1 refused: no client (or no prompt) sent nothing, lost nothing, and passed
    p.add_argument("--clients", type=positive_int, default=32)
    p.add_argument("--groups", type=positive_int, default=16)
    p.add_argument("--candidates", type=positive_int, default=8)
    p.add_argument("--context", type=int_arg(0), default=512, help="tokens of each shared context")
    p.add_argument("--candidate", type=int_arg(0), default=16, help="tokens of each candidate")
    # ids from FIRST_ID up: below --vocab there must be one to draw
    p.add_argument("--vocab", type=int_arg(FIRST_ID + 1), default=512, help="token ids are drawn below this")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-timeout", type=float_arg(positive=True), default=300.0)
    p.add_argument("--log-dir", default="results")
    p.add_argument("--json", type=Path, default=Path("results/fleet_serve.json"))
    p.add_argument("--smoke", action="store_true", help="one router, two clients, a tiny workload (CI)")
    args = p.parse_args()
    for router in args.routers.split(","):
        problem = router_problem(router)
        if problem is not None:
            p.error(f"--routers: {problem.message}")
    if args.context + args.candidate == 0:
        p.error("--context, --candidate: a prompt needs a token (both are 0)")
    if args.replicas < 2:
        p.error(f"--replicas: a fleet needs at least 2 (got {args.replicas}); one replica runs without Ray")
    if args.smoke:
        args.routers, args.clients, args.groups, args.candidates = "checkpoint", 2, 2, 2
        args.context, args.candidate, args.log_dir = 32, 4, str(args.json.parent)
        # a loaded machine starts Ray and its replicas slowly: the smoke test's own 600 s bound
        # is the backstop, readiness (not this figure) ends the wait
        args.start_timeout = max(args.start_timeout, 540.0)
    prompts = workload(args)
    runs = []
    for router in args.routers.split(","):
        run = one_router(args, router, prompts)
        runs.append(run)
        reuse = "n/a" if run.reuse_rate is None else f"{run.reuse_rate:.3f}"
        latency = "n/a" if run.mean_latency_s is None else f"{run.mean_latency_s * 1e3:.0f} ms"
        print(
            f"{router:>10}: {run.answered}/{run.requests} answered, {run.lost} lost, reuse {reuse}, "
            f"mean latency {latency}, wall {run.wall_s:.1f} s; Ctrl-C: "
            f"{run.drain_answered}/{run.drain_sent} drained, exit {run.exit_code} after "
            f"{run.stopped_s or 0:.1f} s, {run.ray_processes_left} Ray processes left",
            flush=True,
        )
        for name, f in run.per_replica.items():
            print(f"{'':>12}replica {name}: {f['answered']} answered, reuse {f['reuse_rate']}")
        for e in sorted(set(run.errors))[:5]:
            print(f"{'':>12}error: {e}")
    doc = {
        "args": vars(args) | {"json": str(args.json)},
        "loadavg": os.getloadavg(),
        "runs": [asdict(r) for r in runs],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=1) + "\n")
    ok = all(
        r.lost == 0
        and r.drain_answered == r.drain_sent
        and r.exit_code == INTERRUPTED
        and r.ray_processes_left == 0
        for r in runs
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
