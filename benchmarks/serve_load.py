"""Load on `radixflow serve`: N concurrent loopback clients for a bounded time.

Starts the server in its own process, then runs ``--clients`` concurrent clients (asyncio +
httpx, one connection each) for ``--duration`` seconds. Each client loops over two kinds of
traffic:

* candidate scoring, as evaluation harnesses send it: ``/v1/completions`` with ``echo`` and
  ``logprobs=1``, ``max_tokens`` 0 or 1, prompt = one of ``--groups`` shared contexts followed by
  one of ``--candidates`` candidates (so most of each prompt is a prefix other requests share);
* chat: ``/v1/chat/completions``, streamed, ``--chat-tokens`` generated tokens.

Every request carries a unique ``X-Request-Id``; the check is that each one got exactly one
answer carrying its id (0 lost, 0 duplicated), a streamed answer ends with exactly one finish
reason and ``[DONE]``, and the server's own counters (answered + refused) equal what was sent.
Prints throughput, TTFT and latency percentiles and errors; writes JSON.

    python benchmarks/serve_load.py --json results/serve_load.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from radixflow.bench.metrics import percentile
from radixflow.cli.args import positive_int
from radixflow.models.io.tokenizer import corpus
from radixflow.server.spawn import serve_process


@dataclass
class Outcome:
    kind: str  # "score" | "chat"
    request_id: str
    status: int | str  # HTTP status, or the transport error's name
    answer_ids: list[str]  # response ids seen (one per answer; a stream's chunks share one)
    latency_s: float
    ttft_s: float | None = None
    completion_tokens: int = 0
    complete: bool = True  # a stream ended with one finish reason and [DONE]


@dataclass(frozen=True)
class Traffic:
    contexts: list[str]
    candidates: list[str]
    chat_share: float
    chat_tokens: int
    model: str


def make_traffic(args: argparse.Namespace) -> Traffic:
    lines = [line for line in corpus() if len(line) > 20]
    rng = random.Random(0)
    contexts = [" ".join(rng.sample(lines, args.context_sentences)) for _ in range(args.groups)]
    candidates = [f" Answer: {line}" for line in rng.sample(lines, args.candidates)]
    return Traffic(contexts, candidates, args.chat_share, args.chat_tokens, args.model)


async def score(http: httpx.AsyncClient, traffic: Traffic, rng: random.Random) -> Outcome:
    rid = f"score-{uuid.uuid4().hex}"
    body = {
        "model": traffic.model,
        "prompt": rng.choice(traffic.contexts) + rng.choice(traffic.candidates),
        "max_tokens": rng.choice([0, 1]),
        "echo": True,
        "logprobs": 1,
        "temperature": 0,
    }
    t0 = time.perf_counter()
    try:
        r = await http.post("/v1/completions", json=body, headers={"X-Request-Id": rid})
    except httpx.HTTPError as e:
        return Outcome("score", rid, type(e).__name__, [], time.perf_counter() - t0)
    latency = time.perf_counter() - t0
    data = r.json()
    ids = [data["id"]] if "id" in data else []
    tokens = data.get("usage", {}).get("completion_tokens", 0)
    return Outcome("score", rid, r.status_code, ids, latency, completion_tokens=tokens)


async def chat(http: httpx.AsyncClient, traffic: Traffic, rng: random.Random) -> Outcome:
    rid = f"chat-{uuid.uuid4().hex}"
    question = rng.choice(traffic.candidates).removeprefix(" Answer: ")
    body = {
        "model": traffic.model,
        "messages": [{"role": "user", "content": f"Explain: {question}"}],
        "max_tokens": traffic.chat_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    out = Outcome("chat", rid, 0, [], 0.0, complete=False)
    finishes, done = 0, False
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body, headers={"X-Request-Id": rid}) as r:
            out.status = r.status_code
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done = True
                elif line.startswith("data: "):
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        out.status = chunk["error"].get("type", "stream_error")
                        continue
                    if chunk["id"] not in out.answer_ids:
                        out.answer_ids.append(chunk["id"])
                    if chunk.get("usage"):
                        out.completion_tokens = chunk["usage"]["completion_tokens"]
                    for choice in chunk["choices"]:
                        if choice["delta"].get("content") and out.ttft_s is None:
                            out.ttft_s = time.perf_counter() - t0
                        finishes += choice["finish_reason"] is not None
    except httpx.HTTPError as e:
        out.status = type(e).__name__
    out.latency_s = time.perf_counter() - t0
    out.complete = done and finishes == 1
    return out


async def client_loop(http: httpx.AsyncClient, traffic: Traffic, deadline: float, seed: int) -> list[Outcome]:
    rng = random.Random(seed)
    outcomes = []
    while time.perf_counter() < deadline:
        kind = chat if rng.random() < traffic.chat_share else score
        outcomes.append(await kind(http, traffic, rng))
    return outcomes


async def run_clients(
    url: str, traffic: Traffic, clients: int, duration: float
) -> tuple[list[Outcome], float]:
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        t0 = time.perf_counter()
        deadline = t0 + duration
        per_client = await asyncio.gather(*(client_loop(http, traffic, deadline, i) for i in range(clients)))
        return [o for outs in per_client for o in outs], time.perf_counter() - t0


def server_env() -> dict[str, str]:
    """The server process's environment. PYTHONSAFEPATH: `python -m` would otherwise put the
    working directory first on sys.path, so a server meant to run another source tree
    (PYTHONPATH, `serve_compare.py`) ran the tree the benchmark was started from."""
    return {**os.environ, "PYTHONSAFEPATH": "1"}


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], str]:
    """The server, up, and its base URL; its standard error passed on as it comes."""
    serve = [args.model, "--max-pending", str(args.max_pending), "--policy", args.policy]
    serve += ["--kv-blocks", str(args.kv_blocks), "--max-requests", str(args.max_requests)]
    for flag in ("torch_threads", "tokenizer_threads"):  # given: passed on (else the server's plan)
        if getattr(args, flag) is not None:
            serve += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    return serve_process(serve, ready_s=300, env=server_env(), relay=True)


def stop_server(server: subprocess.Popen[str]) -> None:
    """A graceful shutdown, as Ctrl-C; killed if it has not exited within two minutes."""
    server.send_signal(signal.SIGINT)
    try:
        server.wait(120)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads) so far; None off Linux.

    Less sensitive to other jobs on the machine than wall-clock rates: CPU per request compares
    servers fairly even when the machine is loaded."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def summarize(outcomes: list[Outcome], elapsed: float, metrics: dict[str, float]) -> dict[str, object]:
    sent = len(outcomes)
    ok = [o for o in outcomes if o.status == 200 and o.complete]
    expected = {"score": "cmpl-", "chat": "chatcmpl-"}
    lost = [o.request_id for o in outcomes if not o.answer_ids]
    duplicated = [o.request_id for o in outcomes if len(o.answer_ids) > 1]
    foreign = [
        o.request_id for o in outcomes if o.answer_ids and o.answer_ids != [expected[o.kind] + o.request_id]
    ]
    errors: dict[str, int] = {}
    for o in outcomes:
        if o.status != 200 or not o.complete:
            key = str(o.status) if o.complete else f"{o.status} (incomplete stream)"
            errors[key] = errors.get(key, 0) + 1
    answered = sum(v for k, v in metrics.items() if k.startswith("radixflow_requests_total{"))
    refused = sum(v for k, v in metrics.items() if k.startswith("radixflow_requests_rejected_total{"))
    by_kind = {}
    for kind in ("score", "chat"):
        mine = [o for o in ok if o.kind == kind]
        lat = [o.latency_s for o in mine]
        ttft = [o.ttft_s for o in mine if o.ttft_s is not None]
        by_kind[kind] = {
            "completed": len(mine),
            "latency_s": {f"p{q}": percentile(lat, q) for q in (50, 90, 99)},
            "mean_latency_s": statistics.fmean(lat) if lat else None,
            "ttft_s": {f"p{q}": percentile(ttft, q) for q in (50, 90, 99)} if kind == "chat" else None,
        }
    generated = metrics.get("radixflow_generation_tokens_total", 0.0)
    computed = metrics.get("radixflow_round_tokens_total", 0.0)
    return {
        "sent": sent,
        "completed": len(ok),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "foreign_ids": len(foreign),
        "errors": errors,
        "server_answered_plus_refused": answered + refused,
        "server_counts_match": answered + refused == sent,
        "elapsed_s": elapsed,
        "requests_per_s": len(ok) / elapsed,
        "generated_tokens_per_s": generated / elapsed,
        "computed_tokens_per_s": computed / elapsed,
        "prompt_tokens": metrics.get("radixflow_prompt_tokens_total"),
        "reuse_rate": metrics.get("radixflow_reuse_rate"),
        "rounds": metrics.get("radixflow_rounds_total"),
        "bubble_tokens": metrics.get("radixflow_bubble_tokens_total"),
        "blocked_consumers": metrics.get("radixflow_blocked_consumers_total"),
        "by_kind": by_kind,
    }


def show(summary: dict[str, object]) -> None:
    def ms(x: object) -> str:
        return "-" if x is None else f"{1e3 * float(x):.0f} ms"  # type: ignore[arg-type]

    s = summary
    machine = s.get("machine") or {}
    if machine:
        print(
            f"{machine['cpus']} CPUs, load average (1 min) {machine['load_1min_before']:.1f} before, "
            f"{machine['load_1min_after']:.1f} after"
        )
    print(
        f"sent {s['sent']}, completed {s['completed']}, lost {s['lost']}, "
        f"duplicated {s['duplicated']}, foreign ids {s['foreign_ids']}, errors {s['errors']}"
    )
    print(
        f"server answered + refused = {summary['server_answered_plus_refused']:.0f} "
        f"(matches sent: {summary['server_counts_match']})"
    )
    print(
        f"{s['requests_per_s']:.1f} requests/s, {s['computed_tokens_per_s']:.0f} computed tokens/s, "
        f"{s['generated_tokens_per_s']:.1f} generated tokens/s, reuse {s['reuse_rate']:.1%}, "
        f"{s['rounds']:.0f} rounds"
    )
    if "server_cpu_s" in s:
        cpu = s["server_cpu_s_per_request"]
        print(f"server CPU {s['server_cpu_s']:.1f} s, {cpu * 1e3:.0f} ms per request")
    for kind, row in summary["by_kind"].items():  # type: ignore[union-attr]
        lat, ttft = row["latency_s"], row["ttft_s"]
        line = f"  {kind:5s} {row['completed']:6d} done  latency p50 {ms(lat['p50'])} p90 {ms(lat['p90'])} "
        line += f"p99 {ms(lat['p99'])}"
        if ttft:
            line += f"  TTFT p50 {ms(ttft['p50'])} p90 {ms(ttft['p90'])} p99 {ms(ttft['p99'])}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--policy", default="radixflow")
    ap.add_argument("--clients", type=positive_int, default=64)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    ap.add_argument("--groups", type=positive_int, default=8, help="shared contexts")
    ap.add_argument("--candidates", type=positive_int, default=16)
    ap.add_argument("--context-sentences", type=positive_int, default=12, help="corpus sentences per context")
    ap.add_argument("--chat-share", type=float, default=0.25)
    ap.add_argument("--chat-tokens", type=positive_int, default=16)
    ap.add_argument("--max-pending", type=positive_int, default=256)
    ap.add_argument("--max-requests", type=positive_int, default=64, help="requests per round")
    ap.add_argument("--kv-blocks", type=positive_int, default=4096)
    ap.add_argument(
        "--torch-threads", type=positive_int, help="passed to the server (default: its thread plan)"
    )
    ap.add_argument(
        "--tokenizer-threads", type=positive_int, help="passed to the server (default: its thread plan)"
    )
    ap.add_argument("--json", type=Path, default=Path("results/serve_load.json"))
    ap.add_argument("--smoke", action="store_true", help="CI: qwen3_5-tiny, four clients for two seconds")
    args = ap.parse_args()
    if args.smoke:
        args.model, args.clients, args.duration, args.groups, args.candidates = "qwen3_5-tiny", 4, 2.0, 2, 2
        args.context_sentences, args.chat_tokens, args.kv_blocks = 2, 2, 256
    if args.clients < 1 or args.duration <= 0:
        raise SystemExit("--clients must be >= 1 and --duration > 0")
    traffic = make_traffic(args)
    load_before = os.getloadavg()[0]
    server, url = start_server(args)
    try:
        cpu_before = cpu_seconds(server.pid)
        outcomes, elapsed = asyncio.run(run_clients(url, traffic, args.clients, args.duration))
        cpu_after = cpu_seconds(server.pid)
        summary = summarize(outcomes, elapsed, scrape(url))
        if cpu_before is not None and cpu_after is not None and summary["completed"]:
            summary["server_cpu_s"] = cpu_after - cpu_before
            summary["server_cpu_s_per_request"] = (cpu_after - cpu_before) / summary["completed"]
        summary["machine"] = {
            "cpus": os.cpu_count(),
            "load_1min_before": load_before,
            "load_1min_after": os.getloadavg()[0],
        }
    finally:
        stop_server(server)
    show(summary)
    config = {k: v for k, v in vars(args).items() if k != "json"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    outcomes_json = [asdict(o) for o in outcomes]
    args.json.write_text(
        json.dumps({"config": config, "summary": summary, "requests": outcomes_json}, indent=2)
    )
    print(f"wrote {args.json}")
    if (
        summary["lost"]
        or summary["duplicated"]
        or summary["foreign_ids"]
        or not summary["server_counts_match"]
    ):
        raise SystemExit("FAILED: some request did not get exactly one answer")


if __name__ == "__main__":
    main()
