"""One HTTP request's prompts on their way through the engine loop (`Submission`): the loop
thread puts events on the submission's asyncio queue; the handler reads them, and aborts what is
left if its client goes away. And what the routes write of an answer: its id, the error a failed
choice makes of the whole response, server-sent events."""

from __future__ import annotations

import asyncio
import json
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from starlette.requests import Request as HttpRequest

from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.errors import ApiError
from radixflow.server.events import Event, Final
from radixflow.server.limits import Answering
from radixflow.server.loop import EngineLoop

T = TypeVar("T")


class ClientGone(Exception):
    """The client closed its connection before the answer was ready."""


class Submission:
    def __init__(
        self,
        loop: EngineLoop,
        items: list[tuple[Request, RequestTracker]],
        stream: bool,
        answering: Answering | None = None,
    ) -> None:
        self.ids = [req.id for req, _ in items]
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self._open = set(range(len(items)))
        self._loop = loop
        # ended once: every prompt's answer on the event loop (read or not: a stream's slow client
        # reads it long after the engine is done), the rest aborted, or this dropped unread (a
        # stream never started); dropped on the event loop, as nothing else holds it
        answering = answering or Answering()  # counted apart when no count is shared
        self._ended = ended = weakref.finalize(self, answering.ended)
        self._ended.atexit = False
        aio, queue, unanswered = asyncio.get_running_loop(), self.queue, set(self._open)

        def arrived(event: Event) -> None:  # on the event loop; the engine thread holds this, not self
            queue.put_nowait(event)
            if isinstance(event, Final):
                unanswered.discard(event.index)
                if not unanswered:
                    ended()

        try:
            loop.submit(items, lambda event: aio.call_soon_threadsafe(arrived, event), stream)
        except BaseException:  # refused: it was never answering
            ended.detach()
            raise
        answering.started()  # before any answer arrives: those come on this loop, later

    async def events(self) -> AsyncIterator[Event]:
        """Events until every prompt has its `Final`."""
        while self._open:
            event = await self.queue.get()
            if isinstance(event, Final):
                self._open.discard(event.index)
            yield event

    async def finals(self) -> list[Final]:
        finals = [e async for e in self.events() if isinstance(e, Final)]
        return sorted(finals, key=lambda f: f.index)

    def abort(self) -> None:
        """Cancel whatever has no answer yet (called when the client is gone)."""
        if self._open:
            self._loop.abort([self.ids[i] for i in sorted(self._open)])
            self._open.clear()
        self._ended()


async def while_connected(http: HttpRequest, work: Awaitable[T]) -> T:
    """``work``'s result, or `ClientGone` if the client leaves first: ``work`` is cancelled then
    (a prompt still queued for a tokenizer thread is never tokenized; one being tokenized is
    dropped when done)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnect(http))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the handler itself was cancelled (server shutting down)
        task.cancel()
        raise
    finally:
        watch.cancel()
    if task in done:
        return task.result()
    task.cancel()
    raise ClientGone


async def unless_disconnected(http: HttpRequest, work: Awaitable[T], submission: Submission) -> T:
    """``work``'s result, or `ClientGone` (after aborting the submission) if the client leaves first."""
    try:
        return await while_connected(http, work)
    except (ClientGone, asyncio.CancelledError):
        submission.abort()
        raise


async def answers(
    http: HttpRequest, submission: Submission, n: int = 1, item: str = "prompt"
) -> list[Final] | None:
    """Every choice's `Final`, in order (``n`` per prompt); None when the client left first
    (nobody reads an answer). The first choice without an answer is raised as the error the whole
    response becomes, naming its prompt as ``item`` ("candidate 2: " on the score route)."""
    try:
        finals = await unless_disconnected(http, submission.finals(), submission)
    except ClientGone:
        return None
    error = failure(finals, n, item)
    if error is not None:
        raise error
    return finals


async def _disconnect(http: HttpRequest) -> None:
    while (await http.receive())["type"] != "http.disconnect":
        pass


def failure(finals: list[Final], n: int = 1, item: str = "prompt") -> ApiError | None:
    """The first choice without an answer, as the error the whole response becomes."""
    bad = next((f for f in finals if f.output is None), None)
    if bad is None:
        return None
    if bad.refused_for is not None:  # refused for another prompt's sake: the answer names that one
        bad = next((f for f in finals if f.index == bad.refused_for), bad)
    said = where(bad.index, len(finals) // n, n, item) + (bad.error or "request failed")
    # a refusal's code (`STATUS_CODES`) as one server's own: a fleet's, every replica's refusal of a
    # prompt, comes as that prompt's answer, and a client backing off on it reads the same
    return ApiError(bad.status, said)


def where(index: int, prompts: int, n: int, item: str = "prompt") -> str:
    """The prefix naming item ``index`` (``prompt * n + choice``) in an error: "prompt 2: ",
    "choice 1: ", "prompt 2: choice 1: ", or nothing when the response has one item (``item``:
    what a prompt is called, "candidate" on the score route)."""
    prompt, choice = divmod(index, n)
    names = [f"{item} {prompt}"] if prompts > 1 else []
    names += [f"choice {choice}"] if n > 1 else []
    return "".join(f"{name}: " for name in names)


def response_id(prefix: str, http: HttpRequest, sent: str | None = None) -> str:
    """``prefix-<X-Request-Id>`` when the client sent one (so it can match answers), else
    ``prefix-<sent>`` (the body's ``request_id``, as vLLM takes it), else random."""
    given = http.headers.get("x-request-id") or sent
    return f"{prefix}-{given if given else uuid.uuid4().hex}"


def id_headers(answer_id: str) -> dict[str, str]:
    """The ``X-Request-Id`` header of an answer with this id, when a header can carry it (printable
    ASCII: a body's ``request_id`` may hold a line break, which the HTTP layer refuses with the
    connection, or a character past Latin-1, a 500); the body's ``id`` always has it."""
    return {"X-Request-Id": answer_id} if answer_id.isascii() and answer_id.isprintable() else {}


# Characters `str.splitlines` ends a line at that JSON leaves raw (it escapes those below U+0020):
# httpx's `iter_lines`, and the SSE readers built on it, would cut an event holding one in two.
_LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\u0085\u2028\u2029"})


def sse(payload: dict[str, object] | str) -> str:
    """One server-sent event of ``payload`` (JSON, or ``[DONE]``) on one line, for any line reader."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    if not data.isascii():  # a flag CPython keeps: no pass over a long echo that needs none
        data = data.translate(_LINE_BREAKS)
    return f"data: {data}\n\n"
