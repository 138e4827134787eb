"""What a caller asks to have generated: the scheduler's sampling parameters plus text-level ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from radixflow.generation.tokenizer import unicode_problem
from radixflow.problems import Problem, ProblemError, number_problem
from radixflow.scheduler.sampling import SPLITMIX_STEP, mix64
from radixflow.scheduler.sampling import SamplingParams as TokenSamplingParams
from radixflow.scheduler.sampling_checks import (
    MAX_TOKENS,
    NO_ALLOWED_TOKEN,
    NO_OPEN_CHOICE,
    plain,
    short_choices_problem,
    shown,
)

STOP_SHAPE = "must be a string or a list of strings"  # said of ``stop`` at every door
MAX_CHOICES = 128  # choices per prompt (``n``) one call may ask for: OpenAI's limit
# Characters of stop strings one request may list, in all: each is searched for on every token
# (on the engine thread, beside every other request), a long one over its length
MAX_STOP_CHARS = 4096
# Characters of guided choices and of bad words one request may list, in all: the output's tokens
# are followed against every choice and every banned word on every step, on the engine thread
MAX_CHOICE_CHARS = 16384
MAX_BAD_WORD_CHARS = 4096
GUIDED = ("guided_choice",)  # a message naming it (`Problem.mentions`: each door spells it)


@dataclass(frozen=True)
class SamplingParams(TokenSamplingParams):
    """Token-level sampling (max_tokens, temperature, top_p, top_k, seed, stop_token_ids,
    ignore_eos, logprobs, prompt_logprobs: see the scheduler's `SamplingParams`) plus what only
    text or a door can decide.

    ``stop`` ends generation at the first occurrence of any of these strings in the generated
    text, which is cut just before it (as OpenAI does), or just after it with
    ``include_stop_str_in_output`` (vLLM's), which also keeps the text of a stop token
    (``stop_token_ids``) or end-of-sequence token that ended it, left out otherwise (with
    ``skip_special_tokens`` False too), as vLLM does; ``skip_special_tokens``
    leaves special tokens (an end-of-sequence token, for instance) out of the text. ``guided_choice`` (vLLM's)
    makes the output one of these strings, each generated as the tokenizer splits it alone
    (`tokenized` turns them into the engine's ``token_choices``). ``bad_words`` (vLLM's) are never
    generated, each as the tokenizer splits it alone and after a space (a word in mid-text).
    ``truncate_prompt_tokens`` (vLLM's) keeps only a prompt's last k tokens (-1: as many as leave
    room for ``max_tokens`` in the model's context; `truncated`). ``n`` asks for that many
    choices per prompt: the door (`LLM`, the server) turns the prompt into ``n`` requests
    (`choices`), whose shared prompt the prefix cache computes once. The engine sees this object
    as its own `SamplingParams` and ignores these fields.
    """

    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    guided_choice: tuple[str, ...] | None = None  # None: free text (an empty list is a problem)
    bad_words: tuple[str, ...] = ()
    truncate_prompt_tokens: int | None = None
    skip_special_tokens: bool = True
    n: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        # Accept what people type: a single string or a list, or None for none (vLLM's default, and
        # the server's null); store a tuple (the object is frozen). Anything else stays as it is,
        # for `problem` to name.
        for name in ("stop", "bad_words"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, ())
        # numpy's integers and bools as Python's (`plain`)
        for name in (
            "n",
            "truncate_prompt_tokens",
            "ignore_eos",
            "include_stop_str_in_output",
            "skip_special_tokens",
        ):
            object.__setattr__(self, name, plain(getattr(self, name)))
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        for name in ("stop", "guided_choice", "bad_words"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))

    def _problem(self) -> Problem | None:
        base = super()._problem()
        if base == NO_OPEN_CHOICE and self.guided_choice:  # the engine's fields, as this door names them
            return Problem("bad_words", "ban every guided_choice (each contains one of them)", GUIDED)
        if base == NO_ALLOWED_TOKEN and self.bad_words:
            return Problem("bad_words", "ban every one of the allowed_token_ids", ("allowed_token_ids",))
        # (guided choices first: only then is min_tokens within max_tokens, a number to spell; a
        # tuple first: an array's truth is numpy's error, its shape is refused below)
        choices = self.guided_choice
        if isinstance(choices, tuple) and choices and base == short_choices_problem(self.min_tokens):
            return short_choices_problem(self.min_tokens, "guided_choice")
        if base is not None:
            return base
        kind = number_problem("n", self.n, True)  # said as every door says a non-integer
        if kind is None and self.truncate_prompt_tokens is not None:
            kind = number_problem("truncate_prompt_tokens", self.truncate_prompt_tokens, True)
        if kind is not None:
            return kind
        texts = self._text_fields_problem()
        if texts is not None:
            return texts
        k = self.truncate_prompt_tokens
        if not (k is None or (isinstance(k, int) and not isinstance(k, bool) and (k >= 1 or k == -1))):
            return Problem(
                "truncate_prompt_tokens", f"must be an integer >= 1, or -1 (what fits), got {shown(k)}"
            )
        if self.guided_choice and self.allowed_token_ids is not None:
            return Problem("allowed_token_ids", "cannot be combined with guided_choice", GUIDED)
        for name in ("include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                return Problem(name, f"must be true or false, got {shown(getattr(self, name))}")
        n = self.n
        if not (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CHOICES):
            return Problem("n", f"must be an integer between 1 and {MAX_CHOICES}, got {shown(n)}")
        return None

    def _text_fields_problem(self) -> Problem | None:
        """What is wrong with the text fields: stop strings, guided choices and bad words (their
        shapes, then their sizes in all)."""
        if not (isinstance(self.stop, tuple) and all(isinstance(s, str) for s in self.stop)):
            return Problem("stop", f"{STOP_SHAPE}, got {shown(self.stop)}")
        if any(s == "" for s in self.stop):
            return Problem("stop", "stop strings must not be empty")
        # no output text holds a lone surrogate: such a stop string would never match (the
        # tokenizer refuses a bad word's or a choice's in the same words)
        for i, said in enumerate(map(unicode_problem, self.stop)):
            if said is not None:
                return Problem("stop", f"item {i}: {said}")
        if isinstance(self.guided_choice, tuple) and not self.guided_choice:  # a choice of nothing
            return Problem("guided_choice", "must not be empty (leave it out for free text)")
        choices = () if self.guided_choice is None else self.guided_choice
        for name, texts in (("guided_choice", choices), ("bad_words", self.bad_words)):
            problem = _texts_problem(name, texts)
            if problem is not None:
                return problem
        for name, texts, (limit, what) in (
            ("stop", self.stop, (MAX_STOP_CHARS, "stop strings")),
            ("guided_choice", choices, (MAX_CHOICE_CHARS, "choices")),
            ("bad_words", self.bad_words, (MAX_BAD_WORD_CHARS, "bad words")),
        ):
            chars = sum(len(t) for t in texts)
            if chars > limit:
                return Problem(name, f"at most {limit} characters of {what} in all, got {chars}")
        return None

    def context_problem(self, context: int) -> Problem | None:
        """What is wrong with these parameters for a model context of ``context`` tokens (None:
        nothing): a truncation past it, as vLLM refuses one (no prompt that long can run)."""
        k = self.truncate_prompt_tokens
        if isinstance(k, int) and k > context:
            return Problem(
                "truncate_prompt_tokens", f"{shown(k)} is more than the model context of {context}"
            )
        return None

    def truncated(self, prompt: list[int], context: int) -> list[int]:
        """``prompt``'s last ``truncate_prompt_tokens`` tokens (all of it when None; -1: what
        leaves room for ``max_tokens`` in a model context of ``context`` tokens, at least one)."""
        k = self.truncate_prompt_tokens
        if k is None:
            return prompt
        keep = max(1, context - self.max_tokens) if k == -1 else k
        return prompt[-keep:] if len(prompt) > keep else prompt

    def room_problem(self, room: int) -> Problem | None:
        """Why these parameters cannot be `fitted` to ``room`` (None: they can): a ``min_tokens``
        past it, which fitting would lower behind the caller's back (vLLM refuses it too). A
        prompt with no room at all is refused as the prompt, not here. Pure."""
        if 1 <= room < self.min_tokens:
            return Problem(
                "min_tokens",
                f"must be at most {room}, the tokens this prompt leaves room for (the model "
                f"context and the KV cache), got {self.min_tokens}",
            )
        return None

    def fitted(self, room: int) -> SamplingParams:
        """These parameters with ``max_tokens`` capped to ``room`` (what the prompt leaves, as
        `Engine.room` says; at least 1, so a prompt with no room is refused as the prompt) and
        ``min_tokens`` to that: for a ``max_tokens`` that is a default the caller never gave, so
        the default never fails where the prompt fits. A cap never raises: ``max_tokens`` 0 (a
        scoring request) stays 0, and runs where its prompt fills the context."""
        fitted = min(self.max_tokens, max(1, room))
        return replace(self, max_tokens=fitted, min_tokens=min(self.min_tokens, fitted))

    def tokenized(self, encode: Callable[[str], list[int]]) -> SamplingParams:
        """These parameters with ``guided_choice`` as the engine's ``token_choices`` and
        ``bad_words`` as its ``bad_token_sequences``, each string split by ``encode`` (the
        tokenizer, no special tokens); themselves when there are none. `ProblemError` naming the
        field and item for a text ``encode`` refuses (ValueError: a lone surrogate)."""
        if not (self.guided_choice or self.bad_words):
            return self
        choices = self.token_choices
        if self.guided_choice:
            choices = tuple(_encoded(encode, "guided_choice", i, c) for i, c in enumerate(self.guided_choice))
        banned = dict.fromkeys(self.bad_token_sequences)  # distinct, in order
        for i, word in enumerate(self.bad_words):
            for text in (word.lstrip(), " " + word.lstrip()):  # at the start, and after a space
                banned.setdefault(_encoded(encode, "bad_words", i, text))
        return replace(self, token_choices=choices, bad_token_sequences=tuple(banned))

    def choices(self) -> list[SamplingParams]:
        """The parameters of each of the ``n`` choices (each with ``n`` 1). With a ``seed``, choice
        0 keeps it and choice ``i`` draws from `choice_seed` ``(seed, i)``, so the choices differ
        and each is what a lone request with its seed would give; unseeded choices draw from the
        engine's generator, one after another."""
        return [
            replace(self, n=1, seed=None if self.seed is None else choice_seed(self.seed, i))
            for i in range(self.n)
        ]


def _encoded(encode: Callable[[str], list[int]], name: str, i: int, text: str) -> tuple[int, ...]:
    """``text`` (item ``i`` of field ``name``) as tokens; its refusal named by field and item, as
    is a text the tokenizer makes no token of (a normalizer may drop it whole), which would be
    refused as the engine's field (``token_choices``), never given."""
    try:
        tokens = tuple(encode(text))
    except ValueError as e:
        raise ProblemError(Problem(name, f"item {i}: {e}")) from None
    if not tokens:
        raise ProblemError(Problem(name, f"item {i} ({text.strip()!r}) is no token to this tokenizer"))
    return tokens


def _texts_problem(name: str, texts: object) -> Problem | None:
    """What is wrong with ``texts`` as a list of choices or bad words (None: nothing)."""
    if not isinstance(texts, tuple) or not all(isinstance(c, str) for c in texts):
        return Problem(name, f"must be a list of strings, got {shown(texts)}")
    blank = next((i for i, c in enumerate(texts) if not c.strip()), None)
    if blank is None:
        return None
    what = "empty" if texts[blank] == "" else "only whitespace"
    return Problem(name, f"item {blank} is {what} ({texts[blank]!r}); each needs text")


def unsent_max_tokens(default: int, min_tokens: int | None) -> int:
    """The ``max_tokens`` of a request that named none: the door's ``default``, or its
    ``min_tokens`` when that asks for more (what `radixflow generate` and the server both do;
    each then caps it to what the prompt leaves, `SamplingParams.fitted`). Never past the largest
    max_tokens: a min_tokens beyond it is refused as itself, not as a max_tokens nobody gave."""
    return default if min_tokens is None else max(default, min(min_tokens, MAX_TOKENS))


def choice_seed(seed: int, choice: int) -> int:
    """The seed of choice ``choice`` of a request seeded ``seed``: ``seed`` itself for choice 0,
    else a 63-bit splitmix64 mix of the two (seeds 1 and 2 with two choices each give four
    unrelated streams, not an overlap). Pure."""
    if choice == 0:
        return seed
    return mix64(seed * 0xD1B54A32D192ED03 + choice * SPLITMIX_STEP)
