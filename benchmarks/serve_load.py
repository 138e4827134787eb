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
import os
import signal
import subprocess
from dataclasses import asdict
from pathlib import Path

import httpx

from radixflow.bench.provenance import write_figures
from radixflow.bench.serve_clients import Outcome, make_traffic, run_clients
from radixflow.bench.serve_summary import show, summarize
from radixflow.bench.spread import load_now
from radixflow.cli.args import float_arg, positive_float, positive_int
from radixflow.server.spawn import serve_process


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


def arguments() -> argparse.ArgumentParser:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3_5-small")
    ap.add_argument("--policy", default="radixflow")
    ap.add_argument("--clients", type=positive_int, default=64)
    ap.add_argument("--duration", type=positive_float, default=30.0, help="seconds of load")
    ap.add_argument("--groups", type=positive_int, default=8, help="shared contexts")
    ap.add_argument("--candidates", type=positive_int, default=16)
    ap.add_argument("--context-sentences", type=positive_int, default=12, help="corpus sentences per context")
    ap.add_argument("--chat-share", type=float_arg(0.0, 1.0), default=0.25, help="chat turns, 0 to 1")
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
    return ap


def parsed(ap: argparse.ArgumentParser) -> argparse.Namespace:
    """The flags (each refused by its type as typed, before ``--smoke`` cuts them to its size)."""
    args = ap.parse_args()
    if args.smoke:
        args.model, args.clients, args.duration, args.groups, args.candidates = "qwen3_5-tiny", 4, 2.0, 2, 2
        args.context_sentences, args.chat_tokens, args.kv_blocks = 2, 2, 256
    return args


def measured(args: argparse.Namespace) -> tuple[list[Outcome], dict[str, object]]:
    """The server started, the clients run against it, the server stopped: every outcome and the
    summary, with the server's CPU seconds (per request) and the machine's load around the run."""
    traffic = make_traffic(
        args.model, args.groups, args.candidates, args.context_sentences, args.chat_share, args.chat_tokens
    )
    load_before = load_now()
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
            "load_1min_after": load_now(),
        }
    finally:
        stop_server(server)
    return outcomes, summary


def main() -> None:
    args = parsed(arguments())
    outcomes, summary = measured(args)
    show(summary)
    config = {k: v for k, v in vars(args).items() if k != "json"}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    outcomes_json = [asdict(o) for o in outcomes]
    write_figures(args.json, {"config": config, "summary": summary, "requests": outcomes_json})
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
