"""OpenAI batch files run offline through the server's own routes (`radixflow run-batch`).

Each input line is OpenAI's batch request, ``{"custom_id", "method": "POST", "url", "body"}``,
for ``/v1/completions``, ``/v1/chat/completions`` or ``/v1/score``. The lines are posted to the
very app `radixflow serve` runs, in this process (no socket), so every body is checked, run and
answered exactly as the server answers it; up to ``concurrency`` at a time, so the engine batches
them. Each answer is written as OpenAI's batch output line, ``{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error": null}``, as soon as it arrives (a 4xx answer is a
response like any other), so a run cut short keeps what it finished.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import IO, Any

import httpx
from fastapi import FastAPI

from radixflow.jsonl import TOO_DEEP, json_object, numbered_lines
from radixflow.options.numerals import written_float
from radixflow.problems import counted, shown
from radixflow.server.errors import error_body
from radixflow.server.json_body import typed_numbers

URLS = ("/v1/completions", "/v1/chat/completions", "/v1/score")
JSON = {"content-type": "application/json"}


class BatchInputError(ValueError):
    """A batch file line that is not a request this command can run (the text names the line)."""


@dataclass(frozen=True)
class BatchLine:
    """One request of the file: where it was, its id, its route and its body as given."""

    line: int  # 1-based line number in the file
    custom_id: str
    url: str
    body: dict[str, Any]


@dataclass
class BatchTally:
    """Answers by status code, one per line (a line refused for a full queue is posted again, and
    counted once, when answered)."""

    by_status: dict[int, int] = field(default_factory=dict)

    def add(self, status: int) -> None:
        self.by_status[status] = self.by_status.get(status, 0) + 1

    @property
    def failed(self) -> int:
        """Lines answered with an error (a 4xx or 5xx status)."""
        return sum(n for status, n in self.by_status.items() if status >= 400)

    def line(self) -> str:
        """The summary: "3 requests: 2 answered 200, 1 answered 404"."""
        counts = ", ".join(f"{n} answered {status}" for status, n in sorted(self.by_status.items()))
        said = counted(sum(self.by_status.values()), "request")
        return f"{said}: {counts}" if counts else said  # none posted: every line's answer was kept


def read_batch(text: str) -> list[BatchLine]:
    """Every non-blank line as a `BatchLine`; `BatchInputError` for the first line that is not
    a POST of a JSON object body to a supported URL, not streamed, under a new ``custom_id``."""
    lines: list[BatchLine] = []
    seen: dict[str, int] = {}  # custom_id -> its line, checked in the same pass: the first fault is named
    for n, raw in numbered_lines(text):
        line = _line(n, raw)
        if line.custom_id in seen:
            first = seen[line.custom_id]
            raise BatchInputError(f"line {n}: custom_id {line.custom_id!r} is line {first}'s too")
        seen[line.custom_id] = n
        lines.append(line)
    if not lines:
        raise BatchInputError("no requests in the file")
    return lines


# An answer with a status from this one up is the server's failure (a round that raised, memory
# run short), not the body's: going on from a partial file drops it and posts its line again. A
# 4xx answer is the body's own fault, the same each time it is posted: it is kept.
SERVER_ERROR = 500


def server_failed(row: dict[str, Any]) -> bool:
    """Whether an output line answers with a server error (`SERVER_ERROR`): posted again."""
    return (status_code(row) or 0) >= SERVER_ERROR


def left_to_run(
    lines: list[BatchLine], rows: list[dict[str, Any]], again: Callable[[dict[str, Any]], bool] | None = None
) -> list[BatchLine]:
    """The lines that ``rows`` (an earlier run's output lines) do not answer, or answer with a
    row ``again`` names (default `server_failed`: posted again), in file order; ValueError
    naming the first row that is not the answer of a line of ``lines`` (one of another file, or
    of a file since edited: its ``custom_id`` on another line), or answers one twice."""
    by_id = {line.custom_id: line for line in lines}
    answered: set[str] = set()
    for n, row in enumerate(rows, 1):
        custom_id = row.get("custom_id")
        line = by_id.get(custom_id) if isinstance(custom_id, str) else None
        if line is None:
            raise ValueError(f"row {n}: custom_id {custom_id!r} is not in --input")
        if row.get("id") != f"batch_req_{line.line}" or status_code(row) is None:
            raise ValueError(
                f"row {n} (custom_id {custom_id!r}) is not the answer of --input's line {line.line}"
            )
        if custom_id in answered:
            raise ValueError(f"row {n}: custom_id {custom_id!r} is answered twice")
        answered.add(custom_id)
    posted = {row["custom_id"] for row in rows if (again or server_failed)(row)}
    return [line for line in lines if line.custom_id not in answered - posted]


def status_code(row: dict[str, Any]) -> int | None:
    """An output line's answer's status code (None: not an output line)."""
    response = row.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def _line(n: int, raw: str) -> BatchLine:
    try:
        # a number no float holds (1e400) kept as typed, for its refusal to quote (`encoded`)
        row = json_object(raw, "custom_id, method, url, body", parse_float=written_float)
    except ValueError as e:
        raise BatchInputError(f"line {n}: {e}") from None
    custom_id, method, url, body = (row.get(k) for k in ("custom_id", "method", "url", "body"))
    if not isinstance(custom_id, str) or not custom_id:
        raise BatchInputError(f"line {n}: custom_id: a non-empty string is expected")
    if method != "POST":
        raise BatchInputError(f"line {n}: method: only POST is supported, got {shown(method)}")
    if url not in URLS:
        raise BatchInputError(f"line {n}: url: one of {', '.join(URLS)} is expected, got {shown(url)}")
    if not isinstance(body, dict):
        raise BatchInputError(f"line {n}: body: a JSON object is expected")
    if body.get("stream") is True:  # any other value is the route's to refuse, as serve does
        raise BatchInputError(f"line {n}: body: stream is not supported in a batch (each answer is one line)")
    return BatchLine(n, custom_id, url, body)


@dataclass
class _Arrivals:
    """How many answers have arrived, and a wake-up for a worker waiting for one."""

    count: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def add(self) -> None:
        async with self.changed:
            self.count += 1
            self.changed.notify_all()

    async def past(self, seen: int) -> None:
        """Return once more than ``seen`` answers have arrived."""
        async with self.changed:
            await self.changed.wait_for(lambda: self.count > seen)


async def _answer(client: httpx.AsyncClient, line: BatchLine, arrivals: _Arrivals) -> httpx.Response:
    """``line``'s answer. ``--max-pending`` counts engine requests (a scoring body's candidates, a
    completion's prompts times n), so bodies of several can fill the queue: the only 429 a route
    gives is a full queue, which holds this batch's requests alone, so the line is posted again
    once another answer has freed room (one was unanswered when it was refused)."""
    try:
        content = encoded(line.body)
    except RecursionError:  # read near json's limit, encoded on a worker's deeper stack
        return httpx.Response(400, json=error_body(400, f"malformed JSON body: {TOO_DEEP}"))
    while True:
        seen = arrivals.count
        answer = await client.post(line.url, content=content, headers=JSON)
        if answer.status_code != 429:
            return answer
        await arrivals.past(seen)


class EngineFailed(Exception):
    """The engine failed as the batch ran (its state unknown): each line left would be answered
    503 at once, so the run stops there, as one cut short by a failure does (its answers so far
    kept, for the same command to go on from)."""


async def run_batch(
    app: FastAPI,
    lines: list[BatchLine],
    out: IO[str],
    concurrency: int,
    progress: Callable[[int, int], None] | None = None,
) -> BatchTally:
    """Post every line to ``app`` (its lifespan run around them: the engine loop starts and
    drains) from ``concurrency`` workers, writing each answer to ``out`` as it arrives;
    `EngineFailed` once the engine has failed, its answers written."""
    tally, arrivals = BatchTally(), _Arrivals()
    loop = app.state.radixflow.loop
    pending = iter(lines)  # shared by the workers: each line is taken by one of them, once
    asyncio.get_running_loop().set_exception_handler(_interrupts_unlogged)
    async with app.router.lifespan_context(app):
        # an exception in a route is answered with a 500, as `radixflow serve` answers it; by
        # default the transport raised it here as well, ending the run
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://batch", timeout=None) as client:

            async def worker() -> None:
                for line in pending:
                    answer = await _answer(client, line, arrivals)
                    # written before any await: a Ctrl-C (a cancel) there keeps the answer
                    out.write(json.dumps(output_line(line, answer.status_code, answer.json())) + "\n")
                    out.flush()
                    tally.add(answer.status_code)
                    await arrivals.add()
                    if progress is not None:
                        progress(sum(tally.by_status.values()), len(lines))
                    if loop.failure is not None:  # no line left can be answered but with a 503
                        raise EngineFailed(loop.failure)

            await _together([worker() for _ in range(min(concurrency, len(lines)))])
    return tally


def _interrupts_unlogged(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's handler of errors nobody awaited, but for a Ctrl-C (or a SIGTERM taken as one)
    that landed in a task: asyncio raises it out of the loop, where the CLI says it in one line;
    the task that kept it too was logged at exit as never retrieved, with its traceback. That
    happens where asyncio has no Ctrl-C handler of its own to cancel the run with (SIGINT ignored:
    a background job)."""
    if not isinstance(context.get("exception"), KeyboardInterrupt):
        loop.default_exception_handler(context)


async def _together(workers: list[Coroutine[Any, Any, None]]) -> None:
    """Run ``workers`` to the end. The first to fail (or a Ctrl-C) cancels the others, and their
    requests are aborted, before the error is raised: the app's shutdown then has nothing to drain
    (`asyncio.gather` left them running, posting more lines)."""
    tasks = [asyncio.ensure_future(w) for w in workers]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def encoded(body: dict[str, Any]) -> bytes:
    """``body`` as the request's bytes, by Python's encoder: it writes NaN and Infinity back as the
    file gave them, for the route to answer (httpx's ``json=`` raises on them, ending the run).
    Compact UTF-8, about the bytes the file's line holds it in, which --max-body-bytes is
    measured on (escaping what is not ASCII took é 6 bytes, an emoji 12: a 413 for a body a
    third of the limit); escaped only where a lone surrogate the file escaped cannot be UTF-8.
    A number no float holds is written as the file typed it (`typed_numbers`)."""
    text = _dumps(body)
    return typed_numbers(body, _dumps) if b"Infinity" in text else text


def _dumps(body: Any) -> bytes:
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode()


def output_line(line: BatchLine, status: int, body: Any) -> dict[str, Any]:
    """OpenAI's batch output line for ``line``'s answer; an error answer, which has no id of its
    own, gets the line's for its ``request_id`` (OpenAI's format has a string there, not null)."""
    own = body.get("id") if isinstance(body, dict) else None
    request_id = own if isinstance(own, str) else f"batch_req_{line.line}"
    return {
        "id": f"batch_req_{line.line}",
        "custom_id": line.custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }
