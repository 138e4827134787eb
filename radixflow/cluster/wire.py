"""What travels between the ingress and a replica: a job (one prompt), and the events it yields.

Events are the server loop's own `Delta`/`Final` (`not_taken`: a replica's refusal of a job it
never ran; `failure_line`: a replica's failure, as Ray raises it at the ingress, in one line); a
prompt's logprobs travel as their columns (`PromptLogprobs`, plain lists) and the ingress
attaches its own tokenizer for their texts, so nothing that holds a tokenizer is pickled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from radixflow.generation.detokenize import token_texts
from radixflow.generation.outputs import PromptTokenLogprobs
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.scheduler.samples import PromptLogprobs
from radixflow.server.events import Delta, Event, Final


@dataclass(frozen=True)
class Job:
    """One prompt for a replica (the router reads ``namespace`` and ``prompt``)."""

    id: str
    prompt: tuple[int, ...]
    namespace: str
    params: SamplingParams
    stream: bool
    # replicas (their ids) that refused this job: a retry's router picks another while one is left
    avoid: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WireEvent:
    event: Event  # with its prompt logprobs taken out
    scored: PromptLogprobs | None = None  # ... and carried here as columns
    replica: str = ""  # which replica answered (on the Final)
    # on the Final: seconds from the replica's first token to its answer. A non-streamed prompt
    # sends the ingress nothing before its answer, so this is how it learns the time to first token
    decode_s: float | None = None


def encode(event: Event, replica: str = "", decode_s: float | None = None) -> WireEvent:
    """``event`` without objects that hold a tokenizer. Pure."""
    if isinstance(event, Delta) and event.delta.prompt_logprobs is not None:
        scored = event.delta.prompt_logprobs.scored
        return WireEvent(Delta(event.index, replace(event.delta, prompt_logprobs=None)), scored, replica)
    if isinstance(event, Final) and event.output is not None and event.output.prompt_logprobs is not None:
        scored = event.output.prompt_logprobs.scored
        output = replace(event.output, prompt_logprobs=None)
        return WireEvent(replace(event, output=output), scored, replica, decode_s)
    return WireEvent(event, None, replica, decode_s)


def decode(wire: WireEvent, prompt: tuple[int, ...], index: int, tokenizer: TextTokenizer | None) -> Event:
    """The event as the ingress's routes read it: prompt ``index`` of its submission, prompt
    logprobs with texts from ``tokenizer``."""
    event = replace(wire.event, index=index)
    if wire.scored is None or tokenizer is None:
        return event
    lp = PromptTokenLogprobs(prompt, wire.scored, partial(token_texts, tokenizer, prompt))
    if isinstance(event, Delta):
        return Delta(index, replace(event.delta, prompt_logprobs=lp))
    assert event.output is not None
    return replace(event, output=replace(event.output, prompt_logprobs=lp))


# A replica answers these before it takes a job: its engine loop died (until its next stats
# report marks it dead, routers may still pick it), it is shutting down, or its own queue is full.
# Another replica can serve the job, as when the replica's actor dies before it sends anything.
# Each by the reason one server counts its own refusal under (`radixflow_requests_rejected_total`).
REFUSALS = {429: "queue_full", 503: "not_accepting"}
NOT_TAKEN = frozenset(REFUSALS)


def not_taken(final: Final) -> bool:
    """``final`` is a replica's refusal of a job it never ran, which another replica may serve. Pure."""
    return final.output is None and final.status in NOT_TAKEN


def failure_line(error: BaseException) -> str:
    """``error`` in one line, for a client's 503 and the log. Ray's errors span many: a dead
    actor's id, pid, name and namespace on tab-indented lines between its two sentences, and a
    replica's own exception as its remote traceback (the exception itself is the ``cause``). Pure."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException) and cause is not error:
        error = cause
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line[0].isspace()]
    return f"{type(error).__name__}: {' '.join(lines)}"
