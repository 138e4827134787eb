"""Rules over token sequences: guided choices (the output must be one of a few sequences) and
banned sequences (the output must contain none of them).

The door tokenizes the caller's strings (`generation.params.SamplingParams.guided_choice`) into
``SamplingParams.token_choices``; from the tokens generated so far this module says which tokens
may come next and whether the output is already a whole choice. The sampler lets only those
tokens be picked (and the end-of-sequence where a whole choice is also the start of a longer one);
the scheduler ends the request once it is a whole choice no other choice extends. A banned
sequence's last token cannot follow its other tokens (`banned_next`), so a choice with a banned
sequence inside can never be finished: both follow only the choices without one (`open_choices`).
Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from radixflow.scheduler.sampling_checks import shown

Sequences = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class ChoiceStep:
    """Where a request stands among its choices."""

    next_tokens: frozenset[int]  # tokens that continue some choice the output is a prefix of
    complete: bool  # the output is itself one of the choices


def choice_step(choices: Sequence[Sequence[int]], generated: Sequence[int]) -> ChoiceStep:
    """Which tokens may follow ``generated`` so the output stays a prefix of some choice."""
    n = len(generated)
    following = [c for c in choices if len(c) >= n and tuple(c[:n]) == tuple(generated)]
    return ChoiceStep(frozenset(c[n] for c in following if len(c) > n), any(len(c) == n for c in following))


def ends_the_output(choices: Sequence[Sequence[int]], generated: Sequence[int]) -> bool:
    """The output is a whole choice that no other choice goes on from: nothing may follow."""
    step = choice_step(choices, generated)
    return step.complete and not step.next_tokens


@lru_cache(maxsize=256)  # asked every decode step of a request, with the same arguments
def open_choices(choices: Sequences, banned: Sequences, shortest: int = 0) -> Sequences:
    """The ``choices`` with no ``banned`` sequence inside them and at least ``shortest`` tokens
    (a request's ``min_tokens``): the only ones an output may become. Following a closed one
    would lead the output where its only way on is banned; a shorter one would end it before
    ``min_tokens``, where an end-of-sequence token may not."""
    by_length: dict[int, set[tuple[int, ...]]] = {}
    for b in banned:
        by_length.setdefault(len(b), set()).add(tuple(b))
    return tuple(c for c in choices if len(c) >= shortest and not _holds_any(tuple(c), by_length))


def _holds_any(whole: tuple[int, ...], by_length: dict[int, set[tuple[int, ...]]]) -> bool:
    """Whether a run of ``whole`` is one of the sequences (grouped by length): each run looked
    up once per length, not compared with every sequence (thousands of choices against
    thousands of bad words took seconds)."""
    return any(whole[i : i + n] in seqs for n, seqs in by_length.items() for i in range(len(whole) - n + 1))


def banned_next(banned: Sequence[Sequence[int]], generated: Sequence[int]) -> set[int]:
    """Tokens that would complete a banned sequence right after ``generated`` (a one-token
    sequence is always banned)."""
    out = set()
    for seq in banned:
        head = len(seq) - 1
        if head == 0 or (len(generated) >= head and tuple(generated[-head:]) == tuple(seq[:head])):
            out.add(seq[-1])
    return out


def sequences_problem(sequences: object, empty_ok: bool) -> str | None:
    """Why ``sequences`` is not a tuple (empty only where ``empty_ok``) of non-empty token-id
    tuples (None: it is)."""
    ok = isinstance(sequences, tuple) and (empty_ok or len(sequences) > 0)
    ok = ok and all(isinstance(c, tuple) and len(c) > 0 for c in sequences)  # type: ignore[union-attr]
    ok = ok and all(isinstance(t, int) and not isinstance(t, bool) for c in sequences for t in c)  # type: ignore[union-attr]
    lists = "a list" if empty_ok else "a non-empty list"
    # quoted as lists and cut (`shown`): repr spelled a 5000-digit id, and raised doing it
    return None if ok else f"must be {lists} of non-empty token-id lists, got {shown(sequences)}"
