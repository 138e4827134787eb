"""What a request asks to have generated: `SamplingParams` (each field's value checks are
`sampling_checks`'), and the seeds a row's draws come from (`mix64`); what comes back is
`samples`'."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from radixflow.problems import Problem, number_problem
from radixflow.scheduler.sampling_checks import (
    MAX_TOKENS,
    NO_ALLOWED_TOKEN,
    NO_OPEN_CHOICE,
    NUMBER_FIELDS,
    OPTIONAL_FIELDS,
    PENALTY_RANGE,
    SEED_RANGE,
    SEED_WORDS,
    allowed_ok,
    alternatives_problem,
    array_hinted,
    banned_alone,
    bias_problem,
    ids_ok,
    is_int,
    is_real,
    min_tokens_ok,
    plain,
    plain_ids,
    short_choices_problem,
    shown,
    within,
)
from radixflow.scheduler.token_sequences import open_choices, sequences_problem

# a temperature below this is greedy, as vLLM's (its _SAMPLING_EPS): drawing at 1e-6 changed
# nothing but a tie for the best token, broken at random instead of by token id
GREEDY_BELOW = 1e-5
_MASK64 = (1 << 64) - 1
SPLITMIX_STEP = 0x9E3779B97F4A7C15  # splitmix64's increment (the golden ratio in 64 bits)
# the other fields a range check's message names (`Problem.mentions`: each door spells them)
MENTIONS = {"min_tokens": ("max_tokens",)}


def mix64(z: int) -> int:
    """splitmix64's finalizer on ``z`` (taken mod 2^64), as a 63-bit seed: nearby inputs give
    unrelated seeds. Pure; a row's seed per position and a choice's seed both come from it."""
    z &= _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


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
    ``presence_penalty`` once if it is there are subtracted; a token outside ``allowed_token_ids``
    (None: every token is allowed) cannot be picked; while fewer than ``min_tokens`` tokens are
    generated, the stop tokens and the end-of-sequence ones (unless ``ignore_eos``) cannot be
    picked either, unless they are all the tokens left (an allow-list of only such tokens is
    refused before it runs, by `engine.runner.ending_allow_list_problem`), and stop strings do
    not count (the caller's rule). With ``token_choices`` the output is one of
    those token sequences: only a token that continues one may be picked (an end-of-sequence token
    too where the output is a whole choice that a longer one extends), and the request ends once
    it is a whole choice nothing extends (`scheduler.token_sequences`). The last token of a
    sequence in ``bad_token_sequences`` cannot be picked right after the rest of it (a one-token
    one never), so only the choices with no banned sequence inside, and of ``min_tokens`` tokens
    at least (a whole choice ends the output, as an end-of-sequence token does), are followed
    (`open_choices`; none is a problem). Reported logprobs are the model's own, before any of this.
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
        for name in ("logit_bias", "stop_token_ids", "bad_token_sequences"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, ())
        # numpy's numbers (a seed from its random, ids from an array) as the Python ones they are
        for name, _ in NUMBER_FIELDS:
            object.__setattr__(self, name, plain(getattr(self, name)))
        bias = self.logit_bias
        if isinstance(bias, Mapping):
            bias = tuple(bias.items())
        if isinstance(bias, list | tuple):
            pairs = tuple(plain_ids(p) if isinstance(p, list | tuple) else p for p in bias)
            object.__setattr__(self, "logit_bias", pairs)
        if is_int(self.top_k) and self.top_k == -1:  # vLLM's other spelling of "no cut"
            object.__setattr__(self, "top_k", 0)
        for name in ("stop_token_ids", "allowed_token_ids"):
            object.__setattr__(self, name, plain_ids(getattr(self, name)))
        for name in ("token_choices", "bad_token_sequences"):
            value = getattr(self, name)
            if isinstance(value, list | tuple):
                object.__setattr__(self, name, tuple(plain_ids(c) for c in value))

    def problem(self) -> Problem | None:
        """Why these parameters are invalid (None when they are fine). Pure."""
        problem = self._problem()
        return None if problem is None else array_hinted(problem, getattr(self, problem.param or "", None))

    def _problem(self) -> Problem | None:
        """`problem`, before an array given for a list is told how to make it one (a door's
        subclass adds its own fields' checks here)."""
        return self._kind_problem() or self._range_problem()

    def _kind_problem(self) -> Problem | None:
        """A number field that holds no number (or no integer), said as every door says it."""
        for name, integer in NUMBER_FIELDS:
            value = getattr(self, name)
            if value is None and name in OPTIONAL_FIELDS:
                continue
            problem = number_problem(name, value, integer)
            if problem is not None:
                return problem
        return None

    def _range_problem(self) -> Problem | None:
        penalty = f"must be a number in [-{PENALTY_RANGE:g}, {PENALTY_RANGE:g}]"
        repetition = is_real(self.repetition_penalty) and self.repetition_penalty > 0
        at_most_max = f"must be an integer between 0 and max_tokens ({shown(self.max_tokens)})"
        capped = f"must be at most {MAX_TOKENS}"
        checks = [
            (is_int(self.max_tokens) and self.max_tokens >= 0, "max_tokens", "must be an integer >= 0"),
            # is_int: this list is built before the check above refuses a non-integer
            (is_int(self.max_tokens) and self.max_tokens <= MAX_TOKENS, "max_tokens", capped),
            (min_tokens_ok(self.min_tokens, self.max_tokens), "min_tokens", at_most_max),
            (is_real(self.temperature) and self.temperature >= 0, "temperature", "must be a number >= 0"),
            (is_real(self.top_p) and 0 < self.top_p <= 1, "top_p", "must be in (0, 1]"),
            (is_int(self.top_k) and self.top_k >= 0, "top_k", "must be an integer >= 0 (0 or -1: no cut)"),
            (is_real(self.min_p) and 0 <= self.min_p <= 1, "min_p", "must be in [0, 1]"),
            (self.seed is None or SEED_RANGE[0] <= self.seed <= SEED_RANGE[1], "seed", SEED_WORDS),
            (ids_ok(self.stop_token_ids), "stop_token_ids", "must be a list of token ids"),
            (allowed_ok(self.allowed_token_ids), "allowed_token_ids", "must be a non-empty list of ids"),
            (isinstance(self.ignore_eos, bool), "ignore_eos", "must be true or false"),
            (within(self.presence_penalty, PENALTY_RANGE), "presence_penalty", penalty),
            (within(self.frequency_penalty, PENALTY_RANGE), "frequency_penalty", penalty),
            (repetition, "repetition_penalty", "must be a number > 0"),
        ]
        for ok, param, message in checks:
            if not ok:
                got = f"{message}, got {shown(getattr(self, param))}"
                return Problem(param, got, MENTIONS.get(param, ()))
        for param in ("logprobs", "prompt_logprobs"):
            problem = alternatives_problem(param, getattr(self, param))
            if problem is not None:
                return problem
        return bias_problem(self.logit_bias) or self._choices_problem()

    def _choices_problem(self) -> Problem | None:
        why = None if self.token_choices is None else sequences_problem(self.token_choices, False)
        if why is not None:
            return Problem("token_choices", why)
        why = sequences_problem(self.bad_token_sequences, True)
        if why is not None:
            return Problem("bad_token_sequences", why)
        if self.token_choices is not None and self.allowed_token_ids is not None:
            return Problem("allowed_token_ids", "cannot be combined with a guided choice")
        allowed = self.allowed_token_ids
        if allowed is not None and set(allowed) <= banned_alone(self.bad_token_sequences):
            return NO_ALLOWED_TOKEN
        if self.open_choices == ():
            unbanned = open_choices(self.token_choices, self.bad_token_sequences)  # type: ignore[arg-type]
            return NO_OPEN_CHOICE if unbanned == () else short_choices_problem(self.min_tokens)
        return None

    @property
    def open_choices(self) -> tuple[tuple[int, ...], ...] | None:
        """The token choices the output may become: those with no banned sequence inside and of
        ``min_tokens`` tokens at least (None: no choices). What the sampler and the scheduler
        follow."""
        if self.token_choices is None:
            return None
        return open_choices(self.token_choices, self.bad_token_sequences, self.min_tokens)

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
