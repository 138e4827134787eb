"""`LLM.score_many`'s batch of many contexts, each with its own candidates: its arguments'
checks, each context's scores cut from the batch's outputs, and each context handed on
(``on_context``) as soon as its last candidate is answered."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from radixflow.generation.calls import PromptError
from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.prompts import (
    Messages,
    Prompt,
    is_conversation,
    is_token_list,
    of_context,
    require_list,
)
from radixflow.generation.scoring import (
    CandidateScore,
    ScoringJob,
    candidate_score,
    candidate_scores,
    refused_candidate,
)
from radixflow.problems import Problem, counted
from radixflow.scheduler.request import Request


def check_score_many(
    contexts: Sequence[Prompt | Messages],
    candidates: Sequence[Sequence[Prompt]],
    on_context: Callable[[int, list[CandidateScore]], None] | None,
) -> None:
    """ValueError naming the argument that is not what `LLM.score_many` takes."""
    if on_context is not None and not callable(on_context):  # else the first context ends the batch
        raise ValueError(f"on_context: must be a function (index, scores), got {on_context!r}")
    if isinstance(contexts, str) or (is_token_list(contexts) and contexts) or is_conversation(contexts):
        raise ValueError("contexts: a list of contexts (use score() for one context)")
    require_list("contexts", contexts, "a list of contexts")
    require_list("candidates", candidates, "a list of candidate lists (one per context)")
    if len(contexts) != len(candidates):
        given = f"{counted(len(contexts), 'context')} for {counted(len(candidates), 'list')}"
        raise ValueError(f"{given} of candidates")


def context_jobs(
    job: Callable[[Prompt | Messages, Sequence[Prompt]], ScoringJob],
    contexts: Sequence[Prompt | Messages],
    candidates: Sequence[Sequence[Prompt]],
) -> tuple[list[ScoringJob], list[list[int]], list[str]]:
    """Each context's scoring ``job`` (its ValueError named by the context: `of_context_error`),
    the batch's prompts (every context's candidates, in order) and each prompt's label ("context
    i, candidate j")."""
    jobs = []
    for i, (context, cands) in enumerate(zip(contexts, candidates, strict=True)):
        try:
            jobs.append(job(context, cands))
        except ValueError as e:
            raise of_context_error(i, e) from None
    prompts = [p for _, prompts in jobs for p in prompts]
    labels = [
        f"context {i}, candidate {j}" for i, (_, prompts) in enumerate(jobs) for j in range(len(prompts))
    ]
    return jobs, prompts, labels


def of_context_error(i: int, error: ValueError) -> ValueError:
    """``error`` (`score`'s, for context ``i`` alone) said of that context (`of_context`), its
    class and fields kept: a caller catching `ScoringInputError` or `ChatTemplateError`, or
    reading the field they name, gets from `score_many` what it gets from `score`."""
    said = copy.copy(error)
    said.args = (of_context(i, str(error)),)
    return said


@contextmanager
def candidates_named(
    problem: Callable[[Request], Problem | None],
    labels: list[str],
    context_lens: list[int],
    prompts: list[list[int]],
) -> Iterator[None]:
    """Inside, a candidate's prompt the engine refuses (a `PromptError`, "candidate 0: prompt:
    ...") is raised as `refused_candidate` says it (``problem``: the engine's check), of the
    candidate in one sentence."""
    try:
        yield
    except PromptError:
        said = refused_candidate(list(zip(labels, context_lens, prompts, strict=True)), problem)
        if said is None:  # not a candidate's prompt (no such refusal): as it was raised
            raise
        raise said from None


def scores_by_context(jobs: list[ScoringJob], outputs: list[GenerationOutput]) -> list[list[CandidateScore]]:
    """Each context's scores, from the batch's outputs in the order of ``jobs``' candidates."""
    scores, start = [], 0
    for ctx, job in jobs:
        scores.append(candidate_scores(len(ctx), outputs[start : start + len(job)]))
        start += len(job)
    return scores


class ContextsHeard:
    """`score_many`'s ``on_context``, fed each candidate's output as it comes: a context is
    handed on once its last candidate is in, scored as `score_many` returns it."""

    def __init__(
        self, shapes: list[tuple[int, int]], on_context: Callable[[int, list[CandidateScore]], None]
    ) -> None:
        self._on_context = on_context
        self._shapes = shapes  # each context's (tokens, candidates)
        self._owner = [i for i, (_, n) in enumerate(shapes) for _ in range(n)]  # prompt -> its context
        self._got: dict[int, dict[int, GenerationOutput]] = {i: {} for i in range(len(shapes))}

    def without_candidates(self) -> None:
        """Hand on the contexts that had no candidate to wait for, once the batch has run."""
        for i, (context_len, n) in enumerate(self._shapes):
            if n == 0:
                self._on_context(i, candidate_scores(context_len, []))

    def __call__(self, prompt: int, output: GenerationOutput) -> None:
        i = self._owner[prompt]
        got = self._got[i]
        got[prompt] = output
        context_len, n = self._shapes[i]
        if len(got) == n:
            self._on_context(i, candidate_scores(context_len, [got[p] for p in sorted(got)]))


def candidate_heard(
    on_candidate: Callable[[CandidateScore], None], context_len: int, i: int, out: GenerationOutput
) -> None:
    """`LLM.score`'s ``on_candidate`` told candidate ``i``'s score, from its output."""
    on_candidate(candidate_score(i, context_len, out))
