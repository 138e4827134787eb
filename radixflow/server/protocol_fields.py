"""Checks of single fields the generation bodies (`protocol`) share: a count of alternatives,
a length limit, ``logit_bias`` keys and values, an integer kept as sent. Each raises `ApiError`
400 in the engine's words, or answers what it checked."""

from __future__ import annotations

import math
import sys
from typing import Any

from radixflow.scheduler.sampling import alternatives_problem
from radixflow.server.errors import TOKEN_ID_KEY, ApiError


def most_alternatives(a: int | None, b: int | None) -> int | None:
    """The larger of two optional alternative counts (None: neither asks)."""
    return b if a is None else a if b is None else max(a, b)


def token_biases(bias: dict[str, float]) -> tuple[tuple[int, float], ...]:
    """OpenAI's ``logit_bias`` (token ids as JSON keys) as (token, bias) pairs; ApiError 400 for
    a key that is not a token id."""
    pairs = []
    for key, value in bias.items():
        why = key_problem(key)
        if why is not None:
            raise ApiError(400, f"logit_bias: {why}", "logit_bias")
        pairs.append((int(key), value))
    return tuple(pairs)


def as_sent(sent: Any, checked: Any) -> Any:
    """``sent`` where it is an integer a float field took as ``checked`` (its float), else
    ``checked``."""
    return sent if type(sent) is int and isinstance(checked, float) else checked


def finite(bias: float) -> bool:
    """Whether a float field takes ``bias`` (an integer past any float it does not, and
    math.isfinite raises OverflowError on one)."""
    return abs(bias) <= sys.float_info.max if isinstance(bias, int) else math.isfinite(bias)


def key_problem(key: str) -> str | None:
    """Why ``key`` is no token id as a ``logit_bias`` key (None: it is one)."""
    # decimal ASCII digits only: int() also reads " 3", "1_0" and other scripts' digits
    if TOKEN_ID_KEY.fullmatch(key) is not None:
        return None
    shown = repr(key) if len(key) <= 40 else f"{key[:40]!r}..."  # one line, however long
    return f"keys must be token ids, got {shown}"


def check_alternatives(param: str, k: int | None) -> None:
    """ApiError 400 when ``k`` is no count of alternatives per token: the engine's check and
    words (`alternatives_problem`), for a field the engine sees under another name or combined."""
    problem = alternatives_problem(param, k)
    if problem is not None:
        raise ApiError.from_problem(problem)


def check_max_tokens(value: int, low: int, context: int, named: str = "max_tokens") -> int:
    """``value`` as sent, once it is within bounds (the default is never checked here): at least
    ``low`` (1 on chat), in `SamplingParams`' words for a count, and at most the model context."""
    if value < low:
        raise ApiError(400, f"{named}: must be an integer >= {low}, got {value}", named)
    if value > context:
        raise ApiError(400, f"{named}: must be at most the model context ({context}), got {value}", named)
    return value
