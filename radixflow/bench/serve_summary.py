"""A load run's figures (benchmarks/serve_load.py): whether every request got exactly one answer
carrying its id, the server's own counts against what was sent, throughput and latency per kind of
request, and the lines printed from them."""

from __future__ import annotations

import statistics

from radixflow.bench.metrics import percentile
from radixflow.bench.serve_clients import Outcome
from radixflow.bench.spread import load_text

# the answer id each kind of request must come back with: this prefix and its X-Request-Id
EXPECTED_PREFIX = {"score": "cmpl-", "chat": "chatcmpl-"}


def summarize(outcomes: list[Outcome], elapsed: float, metrics: dict[str, float]) -> dict[str, object]:
    """The run's figures from its ``outcomes``, the ``elapsed`` seconds they took and the server's
    ``/metrics`` after it."""
    sent = len(outcomes)
    ok = [o for o in outcomes if o.status == 200 and o.complete]
    lost = [o.request_id for o in outcomes if not o.answer_ids]
    duplicated = [o.request_id for o in outcomes if len(o.answer_ids) > 1]
    foreign = [
        o.request_id
        for o in outcomes
        if o.answer_ids and o.answer_ids != [EXPECTED_PREFIX[o.kind] + o.request_id]
    ]
    answered = sum(v for k, v in metrics.items() if k.startswith("radixflow_requests_total{"))
    refused = sum(v for k, v in metrics.items() if k.startswith("radixflow_requests_rejected_total{"))
    generated = metrics.get("radixflow_generation_tokens_total", 0.0)
    computed = metrics.get("radixflow_round_tokens_total", 0.0)
    return {
        "sent": sent,
        "completed": len(ok),
        "lost": len(lost),
        "duplicated": len(duplicated),
        "foreign_ids": len(foreign),
        "errors": errors(outcomes),
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
        "by_kind": by_kind(ok),
    }


def errors(outcomes: list[Outcome]) -> dict[str, int]:
    """Requests that failed or whose stream ended incomplete, counted by status."""
    counts: dict[str, int] = {}
    for o in outcomes:
        if o.status != 200 or not o.complete:
            key = str(o.status) if o.complete else f"{o.status} (incomplete stream)"
            counts[key] = counts.get(key, 0) + 1
    return counts


def by_kind(ok: list[Outcome]) -> dict[str, dict[str, object]]:
    """Completed requests, latency percentiles and mean per kind (TTFT for chat)."""
    out = {}
    for kind in ("score", "chat"):
        mine = [o for o in ok if o.kind == kind]
        lat = [o.latency_s for o in mine]
        ttft = [o.ttft_s for o in mine if o.ttft_s is not None]
        out[kind] = {
            "completed": len(mine),
            "latency_s": {f"p{q}": percentile(lat, q) for q in (50, 90, 99)},
            "mean_latency_s": statistics.fmean(lat) if lat else None,
            "ttft_s": {f"p{q}": percentile(ttft, q) for q in (50, 90, 99)} if kind == "chat" else None,
        }
    return out


def _ms(x: object) -> str:
    return "-" if x is None else f"{1e3 * float(x):.0f} ms"  # type: ignore[arg-type]


def show(summary: dict[str, object]) -> None:
    """The summary's lines: the machine's load, answers, the server's counts, rates, CPU, and a
    line per kind of request."""
    s = summary
    machine = s.get("machine") or {}
    if machine:
        print(
            f"{machine['cpus']} CPUs, load average (1 min) {load_text(machine['load_1min_before'])} before, "
            f"{load_text(machine['load_1min_after'])} after"
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
        line = f"  {kind:5s} {row['completed']:6d} done  latency p50 {_ms(lat['p50'])} p90 {_ms(lat['p90'])} "
        line += f"p99 {_ms(lat['p99'])}"
        if ttft:
            line += f"  TTFT p50 {_ms(ttft['p50'])} p90 {_ms(ttft['p90'])} p99 {_ms(ttft['p99'])}"
        print(line)
