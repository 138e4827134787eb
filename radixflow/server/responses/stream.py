"""A streamed response as server-sent events: the chunks of one shape, each prompt's error, usage.

What every streamed shape shares is here; what its chunks hold is the shape's own (`ChunkShape`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from radixflow.generation.outputs import GenerationOutput
from radixflow.server.errors import error_body
from radixflow.server.events import Delta, Event, Final
from radixflow.server.responses.envelope import Envelope, usage
from radixflow.server.submission import Submission, sse, where


class EventStream(StreamingResponse):
    """A submission's server-sent events, its unanswered requests aborted once the response is
    over however it ended: a send that fails at once (an ASGI 2.4 server's, the client gone)
    leaves the events' generator unstarted, and its own ``finally`` never runs."""

    def __init__(self, submission: Submission, events: AsyncIterator[str], headers: dict[str, str]) -> None:
        super().__init__(events, media_type="text/event-stream", headers=headers)
        self.submission = submission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.submission.abort()  # nothing, where every prompt has its answer


@dataclass(frozen=True)
class Framed:
    """A chunk already framed as its event (`sse`): one a shape built and encoded beside the event
    loop (an echoed prompt's is as long as the prompt)."""

    text: str


class ChunkShape(Protocol):
    """The chunks of one streamed response: each is ``envelope.body(kind, [choice])``."""

    envelope: Envelope
    kind: str  # the chunks' "object"
    prompts: int  # prompts answered: with several, an error names which one failed
    n: int  # choices per prompt: event ``index`` is ``prompt * n + choice``

    def opening(self) -> list[dict[str, Any]]:
        """Choices sent before any token."""
        ...

    async def delta(self, event: Delta) -> dict[str, Any] | Framed | None:
        """The choice for new tokens of one prompt (or its whole chunk, `Framed`); None when there
        is nothing worth sending."""
        ...

    def final(self, event: Final) -> dict[str, Any]:
        """The choice that ends a prompt's answer (``event.output`` is set)."""
        ...


async def sse_stream(submission: Submission, shape: ChunkShape, include_usage: bool) -> AsyncIterator[str]:
    """Each event of ``submission`` as its chunk, then usage if asked for, then ``[DONE]``."""
    outputs: list[tuple[int, GenerationOutput]] = []
    try:
        for choice in shape.opening():
            yield _chunk(shape, choice)
        async for event in submission.events():
            text = await _event_text(shape, event, outputs)
            if text is not None:
                yield text
        if include_usage:
            yield sse({**shape.envelope.body(shape.kind, []), "usage": usage(outputs, shape.n)})
        yield sse("[DONE]")
    finally:
        submission.abort()  # the client left mid-stream (or the stream ended: then nothing is open)


async def _event_text(
    shape: ChunkShape, event: Event, outputs: list[tuple[int, GenerationOutput]]
) -> str | None:
    """The event ``event`` as it is sent: a chunk, or a prompt's error; None for new tokens not
    worth sending. A prompt's output joins ``outputs``, for the usage at the end."""
    if isinstance(event, Delta):
        choice = await shape.delta(event)
        if isinstance(choice, Framed):
            return choice.text
        return None if choice is None else _chunk(shape, choice)
    if event.output is None:
        return sse(error_body(event.status, _failed(event, shape)))  # a refusal's code is filled in
    outputs.append((event.index, event.output))
    return _chunk(shape, shape.final(event))


def _chunk(shape: ChunkShape, choice: dict[str, Any]) -> str:
    return chunk_event(shape.envelope, shape.kind, choice)


def chunk_event(envelope: Envelope, kind: str, choice: dict[str, Any]) -> str:
    """The event of a chunk holding one choice."""
    return sse(envelope.body(kind, [choice]))


def _failed(event: Final, shape: ChunkShape) -> str:
    return where(event.index, shape.prompts, shape.n) + (event.error or "request failed")
