"""A limit on request bodies, enforced before anything parses them; and their encoding (UTF-8).

A body's bytes are counted as they arrive (a chunked upload has no Content-Length, and a declared
length is refused at once without reading anything); past the limit the request gets a 413 in
OpenAI's error shape and the rest of its body is never read or parsed. Without the limit a 10 MB
prompt held the event loop for seconds in JSON parsing, validation and tokenization.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from radixflow.server.errors import ApiError
from radixflow.server.strict import encoding_problem

# The size of the body of the request being handled: set here for each request (the variable's
# value belongs to the request's own task), read by `ServerState.offload` to pick a tokenizer lane.
BODY_BYTES: ContextVar[int] = ContextVar("radixflow_body_bytes", default=0)


class BodyLimit:
    """ASGI middleware: bodies over ``max_bytes`` are refused with a 413; others are read whole
    and handed on (the JSON routes read them whole anyway)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"the request body of {declared} bytes")
            return
        first = await self._read(receive)
        if first is None:
            await self._refuse(scope, receive, send, "the request body")
            return
        body = first.get("body", b"")
        problem = encoding_problem(body) if first["type"] == "http.request" else None
        if problem is not None:
            await ApiError(400, problem).response()(scope, receive, send)
            return
        replay: list[Message] = [first]
        BODY_BYTES.set(len(body))

        async def replayed() -> Message:
            # the body once, then the connection's own messages (a later disconnect, say)
            return replay.pop() if replay else await receive()

        await self.app(scope, replayed, send)

    async def _read(self, receive: Receive) -> Message | None:
        """The whole body as one message; None once it passes the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message  # the client left: the app sees the disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, what: str) -> None:
        error = ApiError(
            413,
            f"{what} is over the server's limit of {self.max_bytes} bytes (radixflow serve --max-body-bytes)",
            None,
            "request_too_large",
        )
        await error.response()(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP layer refuses a malformed length before we see it
    return None
