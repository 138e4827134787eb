"""The checks of a request's `SamplingParams` values, which `SamplingParams.problem` runs in turn
(one validation for every door): the number fields and which are optional, the ranges (64-bit
seeds, penalties, logit biases), the logprob counts (`alternatives_problem`, which the server runs
on ``top_logprobs`` too), and a value shown as the caller sent it (`shown`)."""

from __future__ import annotations

import math

from radixflow.problems import Problem, number_problem, plain
from radixflow.problems import shown as cut

MAX_LOGPROBS = 20  # top alternatives per token a request may ask for
PENALTY_RANGE = 2.0  # presence and frequency penalties lie in [-2, 2], as OpenAI's do
MAX_LOGIT_BIAS = 100.0  # a logit bias lies in [-100, 100], as OpenAI's does
# a seed is read mod 2^64 (`mix64`): one past 64 bits would draw another seed's tokens, unsaid.
# Signed or unsigned 64-bit, as clients send them (OpenAI's is signed, numpy's and torch's unsigned)
SEED_RANGE = (-(2**63), 2**64 - 1)
# far past any context; a bound keeps every count said back short (a 5000-digit number had no str)
MAX_TOKENS = 2**63 - 1
# a seed out of range, in every door's words (the engine option's too)
SEED_WORDS = f"must fit in 64 bits ({SEED_RANGE[0]} to {SEED_RANGE[1]})"
# every choice holds a banned sequence: no output could be both (the door names its own fields)
NO_OPEN_CHOICE = Problem("bad_token_sequences", "ban every one of the token_choices")
# every allowed token is banned on its own: the sampler would pick a banned one (the least unlikely)
NO_ALLOWED_TOKEN = Problem(
    "bad_token_sequences", "ban every one of the allowed_token_ids", ("allowed_token_ids",)
)


def banned_alone(banned: tuple[tuple[int, ...], ...]) -> set[int]:
    """The tokens a one-token banned sequence bans everywhere."""
    return {seq[0] for seq in banned if len(seq) == 1}


def short_choices_problem(min_tokens: int, choices: str = "token_choices") -> Problem:
    """``min_tokens`` no output can meet: every choice it may become is shorter (``choices``: the
    field, as the door names it)."""
    message = f"{min_tokens} cannot be met: every one of the {choices} the output may become is shorter"
    return Problem("min_tokens", message, (choices,))


# the number fields, in the order they are checked, and whether each takes integers only
NUMBER_FIELDS = (
    ("max_tokens", True),
    ("min_tokens", True),
    ("temperature", False),
    ("top_p", False),
    ("top_k", True),
    ("min_p", False),
    ("seed", True),
    ("logprobs", True),
    ("prompt_logprobs", True),
    ("presence_penalty", False),
    ("frequency_penalty", False),
    ("repetition_penalty", False),
)


OPTIONAL_FIELDS = frozenset({"seed", "logprobs", "prompt_logprobs"})  # None: not asked for


def alternatives_problem(param: str, k: object) -> Problem | None:
    """Why ``k`` is no count of top alternatives per token, 0 to `MAX_LOGPROBS` (None: it is one,
    or None, not asked for). Every door's logprobs field (the server's ``top_logprobs`` too)."""
    if k is None or (is_int(k) and 0 <= k <= MAX_LOGPROBS):  # type: ignore[operator]
        return None
    return Problem(param, f"must be an integer between 0 and {MAX_LOGPROBS}, got {shown(k)}")


def ids_ok(ids: object) -> bool:
    """A tuple of integers (the vocabulary's bounds are the engine's check)."""
    return isinstance(ids, tuple) and all(is_int(t) for t in ids)


def allowed_ok(ids: object) -> bool:
    """None, or a non-empty tuple of integers (the vocabulary's bounds are the engine's check)."""
    return ids is None or (isinstance(ids, tuple) and len(ids) > 0 and all(is_int(t) for t in ids))


def min_tokens_ok(low: object, high: object) -> bool:
    """``low`` (min_tokens) an integer in [0, ``high``] (max_tokens, when that is one)."""
    if not is_int(low) or low < 0:  # type: ignore[operator]
        return False
    return not is_int(high) or low <= high  # type: ignore[operator]


def within(x: object, bound: float) -> bool:
    return is_real(x) and -bound <= x <= bound  # type: ignore[operator]


def bias_problem(pairs: object) -> Problem | None:
    """Why ``logit_bias`` is not (token id, bias) pairs with each bias in range (None: it is)."""
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        return Problem("logit_bias", f"must map token ids to biases, got {shown(pairs)}")
    seen = set()
    for token, bias in pairs:
        if not is_int(token):
            return Problem("logit_bias", f"keys must be token ids, got {shown(token)}")
        if token in seen:  # its biases would add up, past the range each is checked against
            return Problem("logit_bias", f"token {shown(token)} is given twice")
        seen.add(token)
        kind = number_problem(bias_name(token), bias)  # said as a flag's or a body's number
        if kind is not None:
            return Problem("logit_bias", f"{kind.param} {kind.message}")
        if not within(bias, MAX_LOGIT_BIAS):
            limit = f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]"
            said = f"{bias_name(token)} must be a number in {limit}, got {shown(bias)}"
            return Problem("logit_bias", said)
    return None


def bias_name(token: object) -> str:
    """One token's bias as every door's refusal names it (``token 5's bias``): `SamplingParams`,
    the CLI's --logit-bias, the server's body."""
    return f"token {shown(token)}'s bias"


def shown(value: object) -> str:
    """``value`` as a refusal shows it: the tuples these parameters keep as the lists the caller
    (or a JSON body) sent, so ``[]`` is not said back as ``()``; a long one cut (`problems.shown`)."""
    return cut(_as_lists(value))


def _as_lists(value: object) -> object:
    return [_as_lists(v) for v in value] if isinstance(value, tuple) else value


def array_hinted(problem: Problem | None, value: object) -> Problem | None:
    """``problem`` of a field holding ``value``, with a way out where the value is an array, or a
    list holding one (numpy's, torch's), as a prompt given one is told: the checks take lists,
    and quoted an array back with no word of how to make it one."""
    items = value if isinstance(value, list | tuple) else (value,)
    if problem is None or not any(map(_is_array, items)):
        return problem
    return Problem(problem.param, f"{problem.message} (an array: pass .tolist())", problem.mentions)


def _is_array(value: object) -> bool:
    """An array of at least one dimension: a scalar's ``.tolist()`` is no list."""
    ndim = getattr(value, "ndim", 0)
    return isinstance(ndim, int) and ndim >= 1 and callable(getattr(value, "tolist", None))


def plain_ids(ids: object) -> object:
    """A list or tuple of token ids with each `plain`; anything else as it is."""
    return tuple(plain(t) for t in ids) if isinstance(ids, list | tuple) else ids


def is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
