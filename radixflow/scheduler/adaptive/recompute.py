"""Wait or recompute: whether a blocked consumer should recompute the prefix it waits for.

A consumer whose checkpoint is still PENDING can wait for its producer (it starts the round after
the checkpoint commits) or start now from a shallower READY point, computing the shared prefix
again. Recomputing finishes it sooner when the producer is still chunking far from the
checkpoint; it costs the requests completing in this round the time the round grows by, and
every request still waiting the time of the duplicated tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.cache.types import Match
from radixflow.scheduler.adaptive.round_time_curve import RoundTimes
from radixflow.scheduler.request import Request
from radixflow.scheduler.scan import PolicyContext


@dataclass(frozen=True)
class Blocked:
    """A blocked consumer, in prompt positions."""

    prompt: int  # its prompt length
    pending: int  # how far it must wait for: its PENDING checkpoint, or the end of the prefix
    # it shares (the producer's next checkpoints would block it again until that is computed)
    ready: int  # its deepest READY point above that (where a recompute would start)
    producer_at: int  # what the producer will have computed when this round ends


def blocked(request: Request, match: Match, context: PolicyContext, producer_at: int) -> Blocked:
    """``request``, blocked on ``match``'s PENDING checkpoint, as `weigh` reads it: where it
    waits to (that checkpoint, or the end of the prefix it shares), and its deepest READY point
    above (where a recompute would start); ``producer_at``: what its producer will have computed."""
    ready = next(iter(context.reuse.shallower(request, match.checkpoint_tokens))).tokens
    registration = request.registration
    shared = 0 if registration is None else context.cache.sharing(registration).tokens
    pending = max(match.checkpoint_tokens, min(shared, len(request.prompt) - 1))
    return Blocked(len(request.prompt), pending, ready, producer_at)


def _rounds(tokens: int, budget: int) -> int:
    return -(-tokens // budget)


def done_waiting(b: Blocked, budget: int) -> int:
    """The round (0: this one) in which the consumer completes its prompt if it waits."""
    commit = _rounds(max(0, b.pending - b.producer_at), budget)  # rounds the producer still needs
    return commit + _rounds(b.prompt - b.pending, budget)


def done_recomputing(b: Blocked, budget: int, left: int) -> int:
    """The round in which it completes its prompt if it starts now with ``left`` tokens of this
    round's budget."""
    return _rounds(max(0, b.prompt - b.ready - left), budget)


@dataclass(frozen=True)
class Verdict:
    recompute: bool
    rounds_saved: int
    benefit_s: float  # what the consumer gains
    cost_s: float  # what everyone else pays


@dataclass(frozen=True)
class Draft:
    """The round so far: its tokens, how many of them are decode steps, and its sampled chunks."""

    tokens: int
    decodes: int
    completions: int  # chunks that sample a token this round


def weigh(b: Blocked, times: RoundTimes, draft: Draft, budget: int, waiting: int) -> Verdict:
    """Recompute when the consumer's gain (the rounds it saves, at a full round's time) exceeds
    the delay to the draft's ``completions`` and to the ``waiting`` requests. Pure but for the
    round-time probe cache."""
    left = budget - draft.tokens
    if left <= 0:
        return Verdict(False, 0, 0.0, 0.0)
    saved = done_waiting(b, budget) - done_recomputing(b, budget, left)
    benefit = saved * times.seconds(budget)
    grows = times.grows(draft.tokens, draft.decodes, min(b.prompt - b.ready, left))
    completions = draft.completions
    cost = grows * completions + (b.pending - b.ready) * times.per_token() * waiting
    return Verdict(saved > 0 and benefit > cost, saved, benefit, cost)
