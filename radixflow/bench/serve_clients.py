"""The closed-loop clients of benchmarks/serve_load.py: what each request asked and what it got.

Each client loops over two kinds of traffic, candidate scoring (``/v1/completions`` with ``echo``
and ``logprobs=1`` over shared contexts) and streamed chat, one request at a time over its own
connection, until the deadline; every request carries a unique ``X-Request-Id`` and its `Outcome`
keeps the answer ids it saw, so the summary can tell lost, duplicated and foreign answers apart.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from dataclasses import dataclass

import httpx

from radixflow.models.io.tokenizer import corpus


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


def make_traffic(
    model: str, groups: int, candidates: int, context_sentences: int, chat_share: float, chat_tokens: int
) -> Traffic:
    """``groups`` contexts of ``context_sentences`` corpus sentences and ``candidates`` answers,
    drawn with a fixed seed (every run sends the same texts)."""
    lines = [line for line in corpus() if len(line) > 20]
    rng = random.Random(0)
    contexts = [" ".join(rng.sample(lines, context_sentences)) for _ in range(groups)]
    answers = [f" Answer: {line}" for line in rng.sample(lines, candidates)]
    return Traffic(contexts, answers, chat_share, chat_tokens, model)


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


@dataclass
class _StreamEnd:
    """How a stream ended so far: ``[DONE]`` seen, finish reasons counted."""

    done: bool = False
    finishes: int = 0


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
    end = _StreamEnd()
    try:
        async with http.stream("POST", "/v1/chat/completions", json=body, headers={"X-Request-Id": rid}) as r:
            out.status = r.status_code
            async for line in r.aiter_lines():
                _read_line(line, out, end, t0)
    except httpx.HTTPError as e:
        out.status = type(e).__name__
    out.latency_s = time.perf_counter() - t0
    out.complete = end.done and end.finishes == 1
    return out


def _read_line(line: str, out: Outcome, end: _StreamEnd, t0: float) -> None:
    """One line of a chat stream into ``out`` (an error chunk's type as its status, the answer
    ids, the usage, the first content's time) and ``end``."""
    if line == "data: [DONE]":
        end.done = True
        return
    if not line.startswith("data: "):
        return
    chunk = json.loads(line[6:])
    if "error" in chunk:
        out.status = chunk["error"].get("type", "stream_error")
        return
    if chunk["id"] not in out.answer_ids:
        out.answer_ids.append(chunk["id"])
    if chunk.get("usage"):
        out.completion_tokens = chunk["usage"]["completion_tokens"]
    for choice in chunk["choices"]:
        if choice["delta"].get("content") and out.ttft_s is None:
            out.ttft_s = time.perf_counter() - t0
        end.finishes += choice["finish_reason"] is not None


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
    """``clients`` clients, one connection each, for ``duration`` seconds: every outcome and the
    seconds they took."""
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        t0 = time.perf_counter()
        deadline = t0 + duration
        per_client = await asyncio.gather(*(client_loop(http, traffic, deadline, i) for i in range(clients)))
        return [o for outs in per_client for o in outs], time.perf_counter() - t0
