"""Which tokens a request's rules let a runner pick next, from the sequence so far (`SamplingParams`'
rules): its allow-list or guided choices, its stop and end-of-sequence tokens held back before
``min_tokens``, and the tokens its banned sequences forbid next. Pure and without torch: the
torch runner's sampler masks its logits by them, the sim runner picks its token by them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from radixflow.scheduler.sampling import SamplingParams
from radixflow.scheduler.token_sequences import banned_next, choice_step


@dataclass(frozen=True)
class TokenRules:
    """What a row may pick: only ``only`` (None: any token), never ``held`` (hard: the rules
    leave a pickable token outside it), and ``banned`` only when nothing else is left (the
    torch sampler makes them the least likely, so a row never runs out of tokens)."""

    only: frozenset[int] | None
    held: frozenset[int]
    banned: frozenset[int]


def token_rules(params: SamplingParams, generated: Sequence[int], eos: tuple[int, ...] = ()) -> TokenRules:
    """The rules for the token after ``generated`` (the output so far). Pure."""
    only = pickable(params, generated, eos)
    held = held_back(params, len(generated), eos)
    if only is not None and only <= held:  # something must stay pickable
        held = frozenset()
    return TokenRules(only, held, frozenset(banned_next(params.bad_token_sequences, generated)))


def pickable(params: SamplingParams, generated: Sequence[int], eos: tuple[int, ...]) -> frozenset[int] | None:
    """The only tokens a row may pick (None: any): its allow-list, or what continues one of its
    open token choices (and ``eos`` where the output is a whole choice a longer one extends)."""
    choices = params.open_choices
    if choices is None:
        allowed = params.allowed_token_ids
        return None if allowed is None else frozenset(allowed)
    step = choice_step(choices, generated)
    ends = frozenset(eos) if step.complete and not params.ignore_eos else frozenset()
    return step.next_tokens | ends


def held_back(params: SamplingParams, generated: int, eos: tuple[int, ...]) -> frozenset[int]:
    """The tokens a row may not pick yet: its stop tokens and ``eos`` (unless it ignores EOS)
    while it has generated fewer than ``min_tokens``."""
    if generated >= params.min_tokens:
        return frozenset()
    return frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else frozenset(eos))
