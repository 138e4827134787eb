"""What the engine loop hands back and raises: a prompt's streamed pieces and its answer (the
sink's events), and the refusals of a submission the loop does not take. The server's handlers,
its responses and the cluster's wire and remote loop speak these, beside the loop itself."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from radixflow.generation.output_processor import Done, FailureKind
from radixflow.generation.outputs import GenerationOutput, StreamDelta
from radixflow.problems import counted


@dataclass(frozen=True)
class Delta:
    index: int  # which prompt of the submission
    delta: StreamDelta


@dataclass(frozen=True)
class Final:
    """A prompt's answer: its output, or the status and message of why it has none."""

    index: int
    output: GenerationOutput | None
    status: int = 200
    error: str | None = None
    # time.monotonic() in the engine's process when its first token came (None: none came): a
    # fleet replica tells its ingress from it how long before the answer that was
    first_token_at: float | None = None
    # not run: its request was refused whole for item ``refused_for``'s sake (a fleet's prompt that
    # every replica refused, as one server refuses a request whole): the request's answer names that one
    refused_for: int | None = None


Event = Delta | Final
Sink = Callable[[Event], None]


class QueueFull(Exception):
    """The bounded queue of accepted, unanswered requests is full (HTTP 429)."""

    @classmethod
    def of(cls, pending: int, adding: int, limit: int, reading: int = 0) -> QueueFull:
        """A submission of ``adding`` requests refused with ``pending`` queued and ``reading``
        more still being tokenized, of ``limit``; one of several prompts (or choices) that would
        pass it says so, or the queue reads as having room."""
        queued = f"{counted(pending, 'request')} {'is' if pending == 1 else 'are'} queued"
        if reading:
            queued += f" and {reading} {'is' if reading == 1 else 'are'} being read"
        queued += f" (limit {limit})"
        if pending + reading < limit:  # one more would fit: this request's own count is what does not
            queued += f"; this one adds {adding}"
        return cls(f"{queued}; retry later")


class NotAccepting(Exception):
    """The server is shutting down or its engine failed (HTTP 503)."""


def final_of(index: int, done: Done, first_token_at: float | None = None) -> Final:
    if done.failure is None:
        return Final(index, done.output, first_token_at=first_token_at)
    status = 400 if done.failure.kind is FailureKind.REFUSED else 500
    return Final(index, None, status, done.failure.reason)


def send(sink: Sink, event: Event) -> None:
    with contextlib.suppress(RuntimeError):  # the event loop is closed: nobody is listening
        sink(event)
