"""Scoring candidates against one shared context: each candidate's logprob given the context.

The niche's core job. The context is tokenized once and each candidate on its own, then joined
as token ids, so every request starts with exactly the same tokens and the prefix cache computes
the context once (tokenizing ``context + candidate`` as one text could merge tokens across the
seam, changing which tokens are scored as the candidate's). Each request generates nothing and
asks for its prompt's logprobs; a candidate's score is the sum over its own tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.params import SamplingParams
from radixflow.generation.prompts import Messages, Prompt, PromptReader, is_conversation
from radixflow.problems import Problem, plain, shown
from radixflow.scheduler.request import Request

SCORING = SamplingParams(max_tokens=0, prompt_logprobs=0)  # the prompt's logprobs, nothing generated


@dataclass(frozen=True)
class CandidateScore:
    """One candidate: its tokens, each one's logprob given the context and the tokens before it,
    its rank there (1: the model's likeliest token), and how much of its prompt came from the
    cache."""

    index: int  # the candidate's place in the call
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    ranks: tuple[int, ...]
    cached_tokens: int  # of the prompt (context and candidate), found in the cache
    prompt_tokens: int = 0  # the prompt's length: context and candidate

    @property
    def total(self) -> float:
        """Log-likelihood of the whole candidate given the context."""
        return sum(self.logprobs)

    @property
    def mean(self) -> float:
        """Per-token log-likelihood (a length-fair ranking)."""
        return self.total / len(self.logprobs)

    @property
    def greedy(self) -> bool:
        """Every token was the model's likeliest there: greedy decoding after the context would
        produce this candidate (lm-evaluation-harness's ``is_greedy``; a token tied with the
        likeliest counts as likeliest)."""
        return all(r == 1 for r in self.ranks)


class ScoringInputError(ValueError):
    """A context or candidate that cannot be scored. ``problem.param`` is the field at fault
    (``context`` or ``candidates``: the server's ``param``), so no door guesses it from the text;
    the text names which candidate ("candidate 1: is empty")."""

    def __init__(self, problem: Problem, text: str | None = None) -> None:
        super().__init__(str(problem) if text is None else text)
        self.problem = problem


# what an empty context is told, at every door (named as each door names the context)
EMPTY_CONTEXT = "is empty (a candidate is scored given the tokens before it)"


# what add_special_tokens true beside a conversation is told, at every door (the chat route's words)
SPECIALS_WITH_MESSAGES = "not implemented with messages: the chat template writes them"


def specials_asked(
    context: object, add_special_tokens: object = None, show: Callable[[object], str] = shown
) -> bool:
    """Whether a text ``context`` is tokenized with the tokenizer's special tokens (None: not
    given, it is); `ScoringInputError` naming ``add_special_tokens`` for a value that is no bool
    (quoted by ``show``), or true given beside a conversation, as /v1/score refuses them."""
    add_special_tokens = plain(add_special_tokens)  # numpy's bool as Python's
    if add_special_tokens is None:
        return True
    if not isinstance(add_special_tokens, bool):
        said = f"must be true or false, got {show(add_special_tokens)}"
        raise ScoringInputError(Problem("add_special_tokens", said))
    if add_special_tokens and is_conversation(context):
        raise ScoringInputError(Problem("add_special_tokens", SPECIALS_WITH_MESSAGES))
    return add_special_tokens


def scoring_prompts(context: Sequence[int], candidates: Sequence[Sequence[int]]) -> list[list[int]]:
    """One prompt per candidate (none for none): the context's tokens, then the candidate's.
    `ScoringInputError` naming the field, ``context`` or ``candidates``, for an empty
    context (its first candidate token would have nothing to be scored against) or candidate."""
    if not context:
        raise ScoringInputError(Problem("context", EMPTY_CONTEXT))
    empty = next((i for i, c in enumerate(candidates) if not c), None)
    if empty is not None:
        raise ScoringInputError(Problem("candidates", "is empty"), f"candidate {empty}: is empty")
    return [[*context, *c] for c in candidates]


def context_problem(context: Sequence[int], problem: Callable[[Request], Problem | None]) -> Problem | None:
    """Why the context alone cannot run (a token id outside the vocabulary, too long), as the
    context's problem: ``problem`` (the engine's check) would find it in every candidate's
    prompt and blame candidate 0. None when the context can run."""
    found = problem(Request("context", tuple(context), sampling=SCORING))
    return None if found is None else Problem("context", found.message)


def refused_candidate(
    prompts: Sequence[tuple[str, int, Sequence[int]]], problem: Callable[[Request], Problem | None]
) -> ScoringInputError | None:
    """The first of ``prompts`` (each candidate's label, its context's length and its prompt: the
    context's tokens, then the candidate's) that ``problem`` (the engine's check) refuses, said of
    the candidate in one sentence (it was "candidate 0: prompt: token id ...", the engine's name for
    what no caller gave): a problem of the candidate's own tokens as theirs ("candidate 0: token id
    9 is outside ..."), one of the whole prompt only (too long, past the KV cache) as the context's
    and candidate's ("candidate 0: context + candidate has 9000 tokens; ..."). None when all can
    run. Asked once a refusal is found: it costs a pass over every prompt."""
    for label, context_len, prompt in prompts:
        found = problem(Request("candidate", tuple(prompt), sampling=SCORING))
        if found is None:
            continue
        alone = problem(Request("candidate", tuple(prompt[context_len:]), sampling=SCORING))
        if found.param != "prompt":  # SCORING's own fields refuse nothing; said whole if one did
            message = found.render()
        elif alone is not None and alone.param == "prompt":
            message = alone.message
        else:
            message = f"context + candidate {found.message}"
        return ScoringInputError(Problem("candidates", message), f"{label}: {message}")
    return None


# a context's tokens and one prompt per candidate (the context's tokens, then the candidate's)
ScoringJob = tuple[list[int], list[list[int]]]


def scoring_job(
    read: PromptReader,
    problem: Callable[[Request], Problem | None],
    context: Prompt | Messages,
    candidates: Sequence[Prompt],
    add_special_tokens: bool | None = None,
) -> ScoringJob:
    """The context's tokens (a text's with the tokenizer's special tokens unless
    ``add_special_tokens`` is False: `specials_asked`) and one prompt per candidate; ValueError
    for input of another shape, `ScoringInputError` for an empty one or a context the engine
    refuses (``problem``: named as the context, not as candidate 0, in whose prompt it would be
    found first)."""
    ctx = read.context(context, specials_asked(context, add_special_tokens))
    prompts = scoring_prompts(ctx, read.candidates(candidates))
    found = context_problem(ctx, problem)
    if found is not None:
        raise ScoringInputError(found)
    return ctx, prompts


def candidate_scores(context_len: int, outputs: Sequence[GenerationOutput]) -> list[CandidateScore]:
    """Each output's candidate part (past ``context_len`` prompt tokens) as a `CandidateScore`."""
    return [candidate_score(i, context_len, out) for i, out in enumerate(outputs)]


def candidate_score(index: int, context_len: int, out: GenerationOutput) -> CandidateScore:
    """Candidate ``index``'s output, past ``context_len`` prompt tokens, as a `CandidateScore`."""
    entries = out.prompt_logprobs
    assert entries is not None  # asked for by SCORING
    part = [e for e in entries[context_len:] if e is not None]
    logprobs = tuple(e.logprob for e in part)
    ranks = tuple(e.rank or 0 for e in part)  # 0: not ranked (a runner that ranks nothing)
    ids = out.prompt_token_ids[context_len:]
    return CandidateScore(index, ids, logprobs, ranks, out.cached_tokens, len(out.prompt_token_ids))
