"""What the engine checks of a request at `Engine.submit`, before anything of it is taken: the
refusals (`SubmitRefused`), the fields' types, the byte budget; and the type checks of its other
arguments (a request id, a round history)."""

from __future__ import annotations

import functools
import math
from collections.abc import Container
from dataclasses import MISSING, fields

from radixflow.cache.ledger import ByteLedger
from radixflow.engine.records import SubmitRefused
from radixflow.problems import Problem
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.request import MAX_ARRIVAL_S, Request, RequestStatus
from radixflow.scheduler.sampling import SamplingParams


def fields_problem(request: Request) -> Problem | None:
    """Why ``request``'s prompt, namespace or sampling is of the wrong type (None: none is), found
    before anything reads them: a runner's checks read the prompt and the sampling, and a
    namespace that is no string would fail its admission mid-round (the fork history hashes it).
    Pure."""
    if not isinstance(request.prompt, tuple | list):  # a set's order is arbitrary, bytes are no ids
        return Problem("prompt", f"must be a list of token ids, got {type(request.prompt).__name__}")
    if not isinstance(request.namespace, str):
        return Problem("namespace", f"must be a string, got {request.namespace!r}")
    if not isinstance(request.sampling, SamplingParams):
        return Problem("sampling", f"must be a SamplingParams, got {request.sampling!r}")
    return None


def checked_id(request_id: str) -> str:
    """``request_id`` as the engine's records are keyed by it; one that is no string (an
    unhashable one raised a bare TypeError out of the lookup) is refused naming it."""
    if not isinstance(request_id, str):
        raise ValueError(f"request_id must be a string, got {request_id!r}")
    return request_id


def is_time(value: object) -> bool:
    """A finite number >= 0; a bool is no time though Python counts it an int (True was 1 s)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


def is_count(value: object) -> bool:
    """An integer >= 0; a bool is none though Python counts it an int."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def scheduler_state(request: Request) -> str | None:
    """The first scheduler-owned field of ``request`` (those from ``status`` on) not at its
    default, as ``name=value`` (None: a fresh request). One set by hand (a working_slot, an
    output) was taken as the engine's own. Pure."""
    for name, default in _scheduler_defaults():
        if getattr(request, name) != default:
            return f"{name}={getattr(request, name)!r}"
    return None


@functools.cache
def _scheduler_defaults() -> tuple[tuple[str, object], ...]:
    """`Request`'s scheduler-owned fields and their defaults, read once: reading the dataclass's
    fields per submit was most of what `refuse_submission` cost. The defaults made by a factory
    (an empty list) are only compared with, never handed out."""
    every = fields(Request)
    owned = every[[f.name for f in every].index("status") :]
    return tuple((f.name, f.default if f.default is not MISSING else f.default_factory()) for f in owned)  # type: ignore[misc]


def refuse_submission(request: Request, known: Container[str]) -> None:
    """Raise `SubmitRefused` (a ValueError) for a request the engine cannot take at all: no
    `Request`, an id that is no string (every queue and answer is keyed by it), a request object
    already submitted (to any engine), an id in ``known`` (in use), scheduler-owned state set by
    hand, or an arrival time that is not a finite number >= 0 (a NaN one would never be admitted)
    or is past `MAX_ARRIVAL_S`. Pure."""
    if not isinstance(request, Request):  # else a bare AttributeError on its first field
        raise SubmitRefused(f"request must be a Request, got {type(request).__name__}")
    if not isinstance(request.id, str):
        raise SubmitRefused(f"request id must be a string, got {request.id!r}")
    if request.submitted or request.status is not RequestStatus.WAITING or request.registration is not None:
        raise SubmitRefused(f"request {request.id!r} was already submitted to an engine")
    if request.id in known:
        raise SubmitRefused(f"duplicate request id {request.id!r}")
    if (state := scheduler_state(request)) is not None:
        raise SubmitRefused(f"request {request.id!r} carries scheduler state ({state})")
    if not is_time(request.arrival_s):
        raise SubmitRefused(f"arrival_s must be a finite number >= 0, got {request.arrival_s!r}")
    if request.arrival_s > MAX_ARRIVAL_S:  # an int past a float's range raised adding the overhead
        raise SubmitRefused(
            f"arrival_s must be at most {MAX_ARRIVAL_S} (seconds): past it the engine clock no longer "
            f"tells µs apart, got {request.arrival_s!r}"
        )


def budget_problem(request: Request, config: SchedulerConfig, ledger: ByteLedger) -> Problem | None:
    """Why ``request``'s KV and working state cannot fit the byte budget of a cache's ``ledger``
    even alone (its entry sizes and budget only: a fleet's ingress checks against a replica's).
    Pure."""
    n = len(request.prompt)
    blocks = config.blocks_needed(0, request.max_length)
    slots = charged_slots(config, n, request.sampling.max_tokens, blocks)
    if ledger.within_budget(blocks, slots):
        return None
    param, prompt_blocks = "max_tokens", config.blocks_needed(0, n)
    prompt_slots = charged_slots(config, n, 1, prompt_blocks)
    if not ledger.within_budget(prompt_blocks, prompt_slots):  # fewer tokens to generate would not help
        param, blocks, slots = "prompt", prompt_blocks, prompt_slots
    need = f"{blocks} KV blocks" + (" and a state slot" if slots else "")
    weight, budget = ledger.bytes_of(blocks, slots), ledger.budget
    return Problem(
        param,
        f"does not fit in the cache_memory budget: it needs {need}, {weight} bytes; "
        f"the budget is {budget} bytes",
    )


def charged_slots(config: SchedulerConfig, prompt_len: int, max_tokens: int, blocks: int) -> int:
    """The state slots a request of ``prompt_len`` tokens asking for ``max_tokens`` is charged
    against the budget: the working slot it holds alone on an idle engine, taken only to carry
    recurrent state between rounds, when its prompt spans several or it decodes more than one
    token (as `RoundBuilder` takes it). One over the KV cap (``blocks`` beyond it) is refused
    anyway; it is charged a slot all the same, for a cap sized from the budget leaves room for
    one (`options.budget.budget_caps`), so its refusal names the budget the user gave. Pure."""
    carries = prompt_len > config.token_budget or max_tokens > 1 or blocks > config.num_blocks
    return 1 if config.has_recurrent and config.num_state_slots > 0 and carries else 0
