"""A limit on request bodies, enforced before anything parses them; their encoding (UTF-8); and
long bodies read one at a time.

A body's bytes are counted as they arrive (a chunked upload has no Content-Length, and a declared
length is refused at once without reading anything); past the limit the request gets a 413 in
OpenAI's error shape and the rest of its body is never read or parsed. Without the limit a 10 MB
prompt held the event loop for seconds in JSON parsing, validation and tokenization.

Long bodies (over ``--long-body-bytes``) are read one piece at a time (`LongBodyLane`): each piece
read costs the event loop a turn, so eight long uploads read side by side put eight pieces ahead
of every step of a short request; read in turn, one. The others wait in their sockets (the HTTP
layer stops reading a body nobody asks for), not on the event loop.

Long bodies also make way for answers (`Answering`): while the engine is answering requests, the
lane reads no piece of a long body and hands no finished one on to be parsed, for at most
``LONG_BODY_YIELD_S`` at a time. On shared cores the engine thread and the event loop compete for
the same CPU time: megabytes of body read and parsed beside a short request's round slowed the round
itself, by the run-queue wait of the engine thread. A long upload under a steady stream of short
requests is read more slowly instead (a piece per ``LONG_BODY_YIELD_S`` at the least).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from radixflow.server.errors import ApiError
from radixflow.server.strict import encoding_problem

# The size of the body of the request being handled: set here for each request (the variable's
# value belongs to the request's own task), read by `ServerState.offload` to pick a tokenizer lane.
BODY_BYTES: ContextVar[int] = ContextVar("radixflow_body_bytes", default=0)

# A long body whose next piece takes longer than this to arrive lets the next long body be read
# meanwhile: a client uploading slowly (or not at all) never holds the lane.
LONG_BODY_STALL_S = 0.5
# The longest a long body waits, each time, for the engine to have no request to answer.
LONG_BODY_YIELD_S = 0.1


class Answering:
    """How many requests the engine is answering (submitted, not all answered nor aborted), and
    a wait until there are none. Used on the event loop only."""

    def __init__(self) -> None:
        self.count = 0
        self._none = asyncio.Event()
        self._none.set()

    def started(self) -> None:
        self.count += 1
        self._none.clear()

    def ended(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._none.set()

    async def none(self, max_s: float) -> None:
        """Returns once no request is being answered, or after ``max_s`` seconds."""
        if self.count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._none.wait(), max_s)


class LongBodyLane:
    """Pieces of long bodies are read one at a time, in turn: a piece is awaited while holding
    the lane, for at most ``stall_s`` seconds (then it is awaited without the lane).

    A piece is awaited directly, with a timer that gives the lane up if it stalls: a body of
    megabytes arrives in dozens of pieces, and a task and a wait per piece cost the event loop
    more than the rest of the lane's work."""

    def __init__(
        self,
        long_bytes: int,
        stall_s: float = LONG_BODY_STALL_S,
        answering: Answering | None = None,
        yield_s: float = LONG_BODY_YIELD_S,
    ) -> None:
        self.long_bytes, self.stall_s, self.yield_s = long_bytes, stall_s, yield_s
        self.answering = answering or Answering()
        self._lane = asyncio.Semaphore(1)

    async def make_way(self) -> None:
        """Until the engine answers no request (at most ``yield_s``): a long body's next step waits."""
        await self.answering.none(self.yield_s)

    async def next(self, receive: Receive, size: int) -> Message:
        """The next message of a body of which ``size`` bytes (read, or declared) are known."""
        if size <= self.long_bytes:
            return await receive()
        await self._lane.acquire()
        held = True
        try:
            await self.make_way()
        except BaseException:  # the request's task was cancelled (the server closing)
            self._lane.release()
            raise

        def give_back() -> None:  # once: when the piece stalls, or has come (or was cancelled)
            nonlocal held
            if held:
                held = False
                self._lane.release()

        stall = asyncio.get_running_loop().call_later(self.stall_s, give_back)
        try:
            return await receive()  # a cancellation (the server closing) cancels the piece too
        finally:
            stall.cancel()
            give_back()


class BodyLimit:
    """ASGI middleware: bodies over ``max_bytes`` are refused with a 413; others are read whole
    and handed on (the JSON routes read them whole anyway)."""

    def __init__(self, app: ASGIApp, max_bytes: int, lane: LongBodyLane) -> None:
        self.app, self.max_bytes, self.lane = app, max_bytes, lane

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"the request body of {declared} bytes")
            return
        first = await self._read(receive, declared or 0)
        if first is None:
            await self._refuse(scope, receive, send, "the request body")
            return
        body = first.get("body", b"")
        refusal = _refusal(scope, body) if first["type"] == "http.request" else None
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        replay: list[Message] = [first]
        BODY_BYTES.set(len(body))

        async def replayed() -> Message:
            # the body once, then the connection's own messages (a later disconnect, say)
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _read(self, receive: Receive, declared: int) -> Message | None:
        """The whole body as one message; None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.lane.next(receive, max(size, declared))
            if message["type"] != "http.request":
                return message  # the client left: the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                if size > self.lane.long_bytes:
                    await self.lane.make_way()  # it is parsed next, in one go
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        error = ApiError(
            413,
            f"{what} is over the server's limit of {self.max_bytes} bytes (--max-body-bytes)",
            None,
            "request_too_large",
        )
        await error.response()(scope, receive, send)


def _refusal(scope: Scope, body: bytes) -> Response | None:
    """The answer to a body that is no JSON text as sent (compressed, or not UTF-8); None when it
    may be one. A request without a body is never refused for its headers (a probe's)."""
    coding = _header(scope, b"content-encoding")
    if body and coding is not None and coding.strip().lower() not in ("", "identity"):
        return _compressed(coding)
    problem = encoding_problem(body)
    return None if problem is None else ApiError(400, problem).response()


def _compressed(coding: str) -> Response:
    """The 415 of a body sent with ``coding``: bodies are read as they come (none is decompressed:
    the limit counts the bytes sent, and a small body may inflate to gigabytes), and the checks
    after this one would call it text in another encoding, or not JSON."""
    said = f"the request body must be sent uncompressed, got Content-Encoding: {coding}"
    response = ApiError(415, said).response()
    response.headers["accept-encoding"] = "identity"  # RFC 7694: the codings a 415 takes
    return response


def _header(scope: Scope, name: bytes) -> str | None:
    """The request's header ``name`` (lower case), as Latin-1 text; None when it was not sent."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None  # the HTTP layer refuses a malformed length before we see it
