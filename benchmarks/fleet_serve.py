"""Two engine replicas on Ray Serve per router, the routers' trials interleaved, under the official
openai client.

Starts ``radixflow serve MODEL --replicas N --router R`` for every router of ``--routers``, each in
its own process with its own Ray, all running side by side; then ``--repeat`` trials, each sending
the same fresh candidate-scoring traffic to every router in turn (the order rotated trial by trial,
so no router always runs first or last on a machine whose load drifts) from ``--clients``
concurrent clients (`openai.AsyncOpenAI`): ``--groups`` shared contexts of ``--context`` token ids,
each followed by ``--candidates`` candidates of ``--candidate`` tokens. Requests rotate over three
kinds: plain completions, streamed completions, and ``echo`` with ``logprobs=1``. Per router: the
median over its trials of the wall time (with its spread, min to max), of the mean latency and of
the fleet's reuse (prompt tokens served from a replica's cache, from the server's ``/fleet``
figures), answers and lost requests (any exception or an answer without its choice) over every
trial, and the machine's load average before each trial and around the whole run. Finally Ctrl-C
(SIGINT) to each server with requests in flight: they must all be answered (drained) and the server
(with the status 130 of a Ctrl-C) and every Ray process it started must exit.

Needs the cluster extra (ray[serve]).

    python benchmarks/fleet_serve.py --json results/fleet_serve.json
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import openai

from radixflow.bench.provenance import write_figures
from radixflow.bench.router_runs import RouterRun, Trial, report, summarize
from radixflow.bench.spread import load_now, loads_now, loads_text, rotated
from radixflow.cli.args import float_arg, int_arg, non_negative_int, positive_int
from radixflow.fleet import MAX_REPLICAS, router_problem
from radixflow.server.fleet_spawn import FleetLaunch, FleetServer, NotReady, fleet_servers, ray_settled

FIRST_ID = 4  # token ids are drawn from here up: past the model's special ids
INTERRUPTED = 130  # the CLI's exit status after a Ctrl-C, once it drained (another: it failed)


def workload(args: argparse.Namespace, trial: int) -> list[list[int]]:
    """Trial ``trial``'s prompts, the same for every router: contexts of its own, so no trial finds
    an earlier one's in the replicas' caches."""
    rng = random.Random(f"{args.seed}:{trial}")
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


async def drive(
    port: int, model: str, prompts: list[list[int]], clients: int, run: RouterRun
) -> tuple[float, float | None]:
    """``prompts`` from ``clients`` concurrent clients, answers and losses counted into ``run``;
    the wall time and the mean latency (None: no request answered)."""
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
    wall = time.monotonic() - t0
    run.requests += len(prompts)
    await client.close()
    return wall, sum(latencies) / len(latencies) if latencies else None


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


def fleet_tokens(port: int) -> tuple[dict[str, Any], int, int]:
    """The server's ``/fleet`` figures per replica, and their prompt and reused tokens summed."""
    answer = httpx.get(f"http://127.0.0.1:{port}/fleet", timeout=10)
    if answer.status_code != 200:  # said as such, not as the JSON error its body would raise
        raise RuntimeError(f"/fleet on port {port} answered {answer.status_code}: {answer.text[:300]!r}")
    replicas = answer.json()["replicas"]
    prompt = sum(f["prompt_tokens"] for f in replicas.values())
    return replicas, prompt, sum(f["reused_tokens"] for f in replicas.values())


def measure_trial(
    args: argparse.Namespace, server: FleetServer, prompts: list[list[int]], trial: int, run: RouterRun
) -> Trial:
    """One trial's traffic to ``server``; its reuse is the growth of the server's /fleet figures."""
    load = load_now()
    _, prompt0, reused0 = fleet_tokens(server.port)
    wall, latency = asyncio.run(drive(server.port, args.model, prompts, args.clients, run))
    run.per_replica, prompt1, reused1 = fleet_tokens(server.port)
    prompt, reused = prompt1 - prompt0, reused1 - reused0
    return Trial(trial, wall, latency, reused / prompt if prompt else None, load)


def interrupted(args: argparse.Namespace, server: FleetServer, run: RouterRun) -> None:
    """The Ctrl-C check on ``server`` (into ``run``), then its Ray processes left."""
    prompts = workload(args, args.repeat)[: args.clients]  # contexts no trial sent
    asyncio.run(interrupt_mid_flight(server.proc, server.port, args.model, prompts, run))
    run.ray_processes_left = ray_settled(server.ray_dir)


def run_all(args: argparse.Namespace, routers: list[str]) -> list[RouterRun]:
    """Every router's server up, ``--repeat`` trials interleaved over them, then each one's Ctrl-C."""
    runs = {router: RouterRun(router) for router in routers}
    launch = FleetLaunch(args.model, args.replicas, args.start_timeout, args.log_dir)
    with fleet_servers(launch, routers) as servers:
        for trial in range(args.repeat):
            prompts = workload(args, trial)
            for router in rotated(routers, trial):
                runs[router].trials.append(measure_trial(args, servers[router], prompts, trial, runs[router]))
        for router in routers:
            interrupted(args, servers[router], runs[router])
    for run in runs.values():
        summarize(run)
    return list(runs.values())


def arguments() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3_5-tiny")
    # as `serve --replicas` takes them (a number it refuses failed only once its server had)
    p.add_argument("--replicas", type=int_arg(1, MAX_REPLICAS), default=2)
    p.add_argument("--routers", default="pow2,prefix,checkpoint")
    # counts below 1 refused: no client (or no prompt) sent nothing, lost nothing, and passed
    p.add_argument("--clients", type=positive_int, default=32)
    p.add_argument("--groups", type=positive_int, default=16)
    p.add_argument("--candidates", type=positive_int, default=8)
    p.add_argument("--context", type=int_arg(0), default=512, help="tokens of each shared context")
    p.add_argument("--candidate", type=int_arg(0), default=16, help="tokens of each candidate")
    # ids from FIRST_ID up: below --vocab there must be one to draw
    p.add_argument("--vocab", type=int_arg(FIRST_ID + 1), default=512, help="token ids are drawn below this")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--repeat", type=positive_int, default=3, help="trials (routers interleaved); medians")
    p.add_argument("--start-timeout", type=float_arg(positive=True), default=300.0)
    p.add_argument("--log-dir", default="results")
    p.add_argument("--json", type=Path, default=Path("results/fleet_serve.json"))
    p.add_argument(
        "--smoke", action="store_true", help="one router, two trials, two clients, a tiny workload (CI)"
    )
    return p


def parsed(p: argparse.ArgumentParser) -> tuple[argparse.Namespace, list[str]]:
    """The flags and the routers, a bad one refused in one line before any server starts; with
    ``--smoke``, cut to its size."""
    args = p.parse_args()
    routers = args.routers.split(",")
    for router in routers:
        problem = router_problem(router)
        if problem is not None:
            p.error(f"--routers: {problem.message}")
    twice = sorted({r for r in routers if routers.count(r) > 1})
    if twice:  # one server per router: a second would share its log and halve its trials
        p.error(f"--routers: {', '.join(twice)} named twice in {args.routers!r}")
    if args.context + args.candidate == 0:
        p.error("--context, --candidate: a prompt needs a token (both are 0)")
    if args.replicas < 2:
        p.error(f"--replicas: a fleet needs at least 2 (got {args.replicas}); one replica runs without Ray")
    if args.smoke:
        # one router: each server is a Ray instance and two replicas to start (most of the run);
        # interleaving the routers' trials is a unit test's (tests/benchmarks/test_fleet_serve.py)
        routers, args.repeat, args.clients, args.groups, args.candidates = ["checkpoint"], 2, 2, 2, 2
        args.routers, args.context, args.candidate = ",".join(routers), 32, 4
        args.log_dir = str(args.json.parent)
        # a loaded machine starts Ray and its replicas slowly (past 540 s at a load of 20): the
        # smoke test's own 1200 s bound is the backstop, readiness (not this figure) ends the wait
        args.start_timeout = max(args.start_timeout, 1140.0)
    return args, routers


def main() -> int:
    args, routers = parsed(arguments())
    load_before = loads_now()
    try:
        runs = run_all(args, routers)
    except NotReady as e:  # a server refused its flags (a mistyped --model), or never came up
        raise SystemExit(f"fleet_serve: {e}") from None
    load_after = loads_now()
    print(f"load average (1, 5, 15 min): before {loads_text(load_before)}, after {loads_text(load_after)}")
    for run in runs:
        report(run, args.repeat)
    doc = {
        "args": vars(args) | {"json": str(args.json)},
        "load_before": load_before,
        "load_after": load_after,
        "runs": [asdict(r) for r in runs],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_figures(args.json, doc)
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
