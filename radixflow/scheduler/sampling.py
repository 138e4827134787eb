"""What a request asks to have generated, and what comes back for each token."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import overload

from radixflow.problems import Problem, number_problem
from radixflow.scheduler.token_sequences import open_choices, sequences_problem

MAX_LOGPROBS = 20  # top alternatives per token a request may ask for
PENALTY_RANGE = 2.0  # presence and frequency penalties lie in [-2, 2], as OpenAI's do
MAX_LOGIT_BIAS = 100.0  # a logit bias lies in [-100, 100], as OpenAI's does
# a temperature below this is greedy, as vLLM's (its _SAMPLING_EPS): drawing at 1e-6 changed
# nothing but a tie for the best token, broken at random instead of by token id
GREEDY_BELOW = 1e-5
_MASK64 = (1 << 64) - 1
# a seed is read mod 2^64 (`mix64`): one past 64 bits would draw another seed's tokens, unsaid.
# Signed or unsigned 64-bit, as clients send them (OpenAI's is signed, numpy's and torch's unsigned)
SEED_RANGE = (-(2**63), 2**64 - 1)


SPLITMIX_STEP = 0x9E3779B97F4A7C15  # splitmix64's increment (the golden ratio in 64 bits)


def mix64(z: int) -> int:
    """splitmix64's finalizer on ``z`` (taken mod 2^64), as a 63-bit seed: nearby inputs give
    unrelated seeds. Pure; a row's seed per position and a choice's seed both come from it."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


# every choice holds a banned sequence: no output could be both (the door names its own fields)
NO_OPEN_CHOICE = Problem("bad_token_sequences", "ban every one of the token_choices")


class FinishReason(Enum):
    STOP = "stop"  # an end-of-sequence or stop token, or a stop string seen by the caller
    LENGTH = "length"  # max_tokens generated


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each generated token. The default is one greedy token.

    ``temperature`` 0 (or below `GREEDY_BELOW`, 1e-5, as vLLM rules) is greedy; otherwise the
    distribution is scaled by ``1/temperature``, tokens less likely than ``min_p`` times the most
    likely one are dropped (vLLM's min-p; 0: none), and what is left is cut to the ``top_k`` most
    likely tokens (0: no cut; exactly k: of the tokens tied with the k-th, the lowest ids stay,
    where vLLM keeps them all) and to the smallest set whose probability reaches ``top_p``. With a
    ``seed`` the tokens depend only on the seed, the model and the sequence so far, never on what
    else shares the round.

    Before a token is picked (greedy too) its logits are adjusted, in vLLM's order: ``logit_bias``
    ``(token, bias)`` pairs are added; ``repetition_penalty`` divides the positive logits of every
    token in the prompt or the output so far and multiplies the negative ones (transformers'
    rule); ``frequency_penalty`` times a token's count in the output so far and
    ``presence_penalty`` once if it is there are subtracted; a token outside
    ``allowed_token_ids`` (None: every token is allowed) cannot be picked; while fewer than
    ``min_tokens`` tokens are generated, the stop tokens and the end-of-sequence ones (unless
    ``ignore_eos``) cannot be picked either, unless they are all the allowed tokens left (and stop
    strings do not count, the caller's rule). With ``token_choices`` the output is one of those
    token sequences: only a token that continues one may be picked (an end-of-sequence token too
    where the output is a whole choice that a longer one extends), and the request ends once it is
    a whole choice nothing extends (`scheduler.token_sequences`). The last token of a sequence in
    ``bad_token_sequences`` cannot be picked right after the rest of it (a one-token one never), so
    only the choices with no banned sequence inside are followed (`open_choices`; none is a problem).
    Reported logprobs are the model's own, before any of this.
    """

    max_tokens: int = 1
    min_tokens: int = 0
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # alternatives reported per generated token (None: only its own)
    prompt_logprobs: int | None = None  # None: none; k: each prompt token's logprob and top k
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None  # vLLM's: the only tokens that may be picked
    token_choices: tuple[tuple[int, ...], ...] | None = None  # the output is one of these
    bad_token_sequences: tuple[tuple[int, ...], ...] = ()  # the output contains none of these

    def __post_init__(self) -> None:
        # Accept what people write: a mapping of token id to bias (OpenAI's ``logit_bias``) or
        # lists; store tuples (the object is frozen and hashable). Bad values stay for `problem`.
        # None is none, as vLLM's defaults and a JSON null say.
        for name in ("logit_bias", "stop_token_ids"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, ())
        bias = self.logit_bias
        if isinstance(bias, Mapping):
            object.__setattr__(self, "logit_bias", tuple(bias.items()))
        elif isinstance(bias, list | tuple):
            pairs = tuple(tuple(p) if isinstance(p, list) else p for p in bias)
            object.__setattr__(self, "logit_bias", pairs)
        if self.top_k == -1 and _is_int(self.top_k):  # vLLM's other spelling of "no cut"
            object.__setattr__(self, "top_k", 0)
        for name in ("stop_token_ids", "allowed_token_ids"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("token_choices", "bad_token_sequences"):
            value = getattr(self, name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, name, tuple(tuple(c) if isinstance(c, list) else c for c in value))

    def problem(self) -> Problem | None:
        """Why these parameters are invalid (None when they are fine). Pure."""
        return self._kind_problem() or self._range_problem()

    def _kind_problem(self) -> Problem | None:
        """A number field that holds no number (or no integer), said as every door says it."""
        for name, integer in _NUMBER_FIELDS:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            problem = number_problem(name, value, integer)
            if problem is not None:
                return problem
        return None

    def _range_problem(self) -> Problem | None:
        penalty = f"must be a number in [-{PENALTY_RANGE:g}, {PENALTY_RANGE:g}]"
        repetition = _is_real(self.repetition_penalty) and self.repetition_penalty > 0
        at_most_max = f"must be an integer between 0 and max_tokens ({self.max_tokens!r})"
        seeds = f"must fit in 64 bits ({SEED_RANGE[0]} to {SEED_RANGE[1]})"
        checks = [
            (_is_int(self.max_tokens) and self.max_tokens >= 0, "max_tokens", "must be an integer >= 0"),
            (_min_tokens_ok(self.min_tokens, self.max_tokens), "min_tokens", at_most_max),
            (_is_real(self.temperature) and self.temperature >= 0, "temperature", "must be a number >= 0"),
            (_is_real(self.top_p) and 0 < self.top_p <= 1, "top_p", "must be in (0, 1]"),
            (_is_int(self.top_k) and self.top_k >= 0, "top_k", "must be an integer >= 0 (0 or -1: no cut)"),
            (_is_real(self.min_p) and 0 <= self.min_p <= 1, "min_p", "must be in [0, 1]"),
            (self.seed is None or SEED_RANGE[0] <= self.seed <= SEED_RANGE[1], "seed", seeds),
            (_ids_ok(self.stop_token_ids), "stop_token_ids", "must be a list of token ids"),
            (_allowed_ok(self.allowed_token_ids), "allowed_token_ids", "must be a non-empty list of ids"),
            (isinstance(self.ignore_eos, bool), "ignore_eos", "must be true or false"),
            (_within(self.presence_penalty, PENALTY_RANGE), "presence_penalty", penalty),
            (_within(self.frequency_penalty, PENALTY_RANGE), "frequency_penalty", penalty),
            (repetition, "repetition_penalty", "must be a number > 0"),
        ]
        for ok, param, message in checks:
            if not ok:
                return Problem(param, f"{message}, got {shown(getattr(self, param))}")
        for param in ("logprobs", "prompt_logprobs"):
            problem = alternatives_problem(param, getattr(self, param))
            if problem is not None:
                return problem
        return _bias_problem(self.logit_bias) or self._choices_problem()

    def _choices_problem(self) -> Problem | None:
        why = None if self.token_choices is None else sequences_problem(self.token_choices, False)
        if why is not None:
            return Problem("token_choices", why)
        why = sequences_problem(self.bad_token_sequences, True)
        if why is not None:
            return Problem("bad_token_sequences", why)
        if self.token_choices is not None and self.allowed_token_ids is not None:
            return Problem("allowed_token_ids", "cannot be combined with a guided choice")
        if self.open_choices == ():
            return NO_OPEN_CHOICE
        return None

    @property
    def open_choices(self) -> tuple[tuple[int, ...], ...] | None:
        """The token choices the output may become: those with no banned sequence inside (None:
        no choices). What the sampler and the scheduler follow."""
        if self.token_choices is None:
            return None
        return open_choices(self.token_choices, self.bad_token_sequences)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def adjusts_logits(self) -> bool:
        """Whether a bias, a penalty, a ban, an allow-list, choices or ``min_tokens`` change the
        logits a token is picked from."""
        penalties = (self.presence_penalty, self.frequency_penalty, self.repetition_penalty)
        limited = self.allowed_token_ids is not None or self.token_choices is not None
        limited = limited or bool(self.bad_token_sequences)
        return bool(self.logit_bias) or penalties != (0, 0, 1) or self.min_tokens > 0 or limited


# the number fields, in the order they are checked, and whether each takes integers only
_NUMBER_FIELDS = (
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
_OPTIONAL = frozenset({"seed", "logprobs", "prompt_logprobs"})  # None: not asked for


def alternatives_problem(param: str, k: object) -> Problem | None:
    """Why ``k`` is no count of top alternatives per token, 0 to `MAX_LOGPROBS` (None: it is one,
    or None, not asked for). Every door's logprobs field (the server's ``top_logprobs`` too)."""
    if k is None or (_is_int(k) and 0 <= k <= MAX_LOGPROBS):  # type: ignore[operator]
        return None
    return Problem(param, f"must be an integer between 0 and {MAX_LOGPROBS}, got {k!r}")


def _ids_ok(ids: object) -> bool:
    """A tuple of integers (the vocabulary's bounds are the engine's check)."""
    return isinstance(ids, tuple) and all(_is_int(t) for t in ids)


def _allowed_ok(ids: object) -> bool:
    """None, or a non-empty tuple of integers (the vocabulary's bounds are the engine's check)."""
    return ids is None or (isinstance(ids, tuple) and len(ids) > 0 and all(_is_int(t) for t in ids))


def _min_tokens_ok(low: object, high: object) -> bool:
    """``low`` (min_tokens) an integer in [0, ``high``] (max_tokens, when that is one)."""
    if not _is_int(low) or low < 0:  # type: ignore[operator]
        return False
    return not _is_int(high) or low <= high  # type: ignore[operator]


def _within(x: object, bound: float) -> bool:
    return _is_real(x) and -bound <= x <= bound  # type: ignore[operator]


def _bias_problem(pairs: object) -> Problem | None:
    """Why ``logit_bias`` is not (token id, bias) pairs with each bias in range (None: it is)."""
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        return Problem("logit_bias", f"must map token ids to biases, got {shown(pairs)}")
    seen = set()
    for token, bias in pairs:
        if not _is_int(token):
            return Problem("logit_bias", f"keys must be token ids, got {token!r}")
        if token in seen:  # its biases would add up, past the range each is checked against
            return Problem("logit_bias", f"token {token} is given twice")
        seen.add(token)
        kind = number_problem(f"token {token}'s bias", bias)  # said as a flag's or a body's number
        if kind is not None:
            return Problem("logit_bias", f"{kind.param} {kind.message}")
        if not _within(bias, MAX_LOGIT_BIAS):
            limit = f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}]"
            return Problem("logit_bias", f"token {token}'s bias must be a number in {limit}, got {bias!r}")
    return None


def shown(value: object) -> str:
    """``value`` as a refusal shows it: the tuples these parameters keep as the lists the caller
    (or a JSON body) sent, so ``[]`` is not said back as ``()``."""
    return repr(_as_lists(value))


def _as_lists(value: object) -> object:
    return [_as_lists(v) for v in value] if isinstance(value, tuple) else value


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True)
class Sample:
    """A generated token with its logprob and the most likely alternatives (best first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class PromptLogprob:
    """Logprob of the prompt token at ``position`` given the tokens before it, and the top ones."""

    position: int
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    rank: int | None = None  # 1 + how many tokens the model found likelier there


@dataclass
class PromptLogprobs(Sequence[PromptLogprob]):
    """Prompt logprobs as columns: row ``i`` scores the prompt token at ``positions[i]``.

    The runner fills the columns from its tensors in one conversion per round and the scheduler
    appends them (`extend`); a reader that wants columns (the server's echo) builds no object
    per position. Read as a sequence, it is the `PromptLogprob` of each row, built on access."""

    positions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)  # per row, the best first
    top_logprobs: list[list[float]] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)  # per row, the token's rank (empty: not known)

    def extend(self, more: PromptLogprobs) -> None:
        """Append ``more``'s rows (mutates this one)."""
        self.positions.extend(more.positions)
        self.tokens.extend(more.tokens)
        self.logprobs.extend(more.logprobs)
        self.top_ids.extend(more.top_ids)
        self.top_logprobs.extend(more.top_logprobs)
        self.ranks.extend(more.ranks)

    def rank(self, i: int) -> int | None:
        """Row ``i``'s rank (None where the producer did not rank its rows)."""
        i = range(len(self))[i]  # a negative index counts from the end of the rows
        return self.ranks[i] if i < len(self.ranks) else None

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, i: int) -> PromptLogprob: ...
    @overload
    def __getitem__(self, i: slice) -> list[PromptLogprob]: ...
    def __getitem__(self, i: int | slice) -> PromptLogprob | list[PromptLogprob]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        top = tuple(zip(self.top_ids[i], self.top_logprobs[i], strict=True))
        return PromptLogprob(self.positions[i], self.tokens[i], self.logprobs[i], top, self.rank(i))

    def __iter__(self) -> Iterator[PromptLogprob]:
        return (self[i] for i in range(len(self)))
