"""How `LLM.score`, `score_many` and `scoring_problem` say a candidate cannot run: one sentence
naming the candidate and the problem, the same at every door."""

from __future__ import annotations

import re

import pytest

from radixflow.generation import LLM
from radixflow.generation.scoring import ScoringInputError

MODEL = "qwen3_5-tiny"


@pytest.fixture(scope="module")
def llm(zoo) -> LLM:
    return LLM(MODEL, kv_blocks=1024, state_slots=8)


def _said(llm: LLM, context: list[int], candidates: list[list[int]], message: str) -> None:
    """``message`` from `score` (a ScoringInputError naming the candidates' field), from
    `scoring_problem`, and from `score_many` said of its context."""
    with pytest.raises(ScoringInputError, match="^" + re.escape(message) + "$") as alone:
        llm.score(context, candidates)
    assert alone.value.problem.param == "candidates"
    assert llm.scoring_problem(context, candidates) == message
    with pytest.raises(ScoringInputError, match="^" + re.escape(f"context 1, {message}") + "$"):
        llm.score_many([[5], context], [[[6]], candidates])
    assert llm.engine.requests == []  # refused before any ran


def test_a_candidate_token_outside_the_vocabulary_is_said_of_the_candidate(llm):
    # it was "candidate 1: prompt: token id 1000000 is ...": the label, then the engine's own
    _said(llm, [5, 6], [[7], [8, 10**6]], "candidate 1: token id 1000000 is outside the vocabulary (0..511)")


def test_a_prompt_too_long_only_with_its_context_says_so(llm):
    # "candidate 0: prompt: has 8300 tokens", where the candidate alone has 300
    said = "candidate 0: context + candidate has 8300 tokens; the model context is 8192"
    _said(llm, [5] * 8000, [[6] * 300], said)


def test_a_candidate_too_long_alone_is_said_of_the_candidate(llm):
    _said(llm, [5], [[6] * 9000], "candidate 0: has 9000 tokens; the model context is 8192")


def test_a_prompt_past_the_kv_cache_says_it_of_context_and_candidate(zoo):
    small = LLM(MODEL, kv_blocks=8, state_slots=8, token_budget=64)
    said = "candidate 0: context + candidate does not fit in the KV cache: 150 tokens need 10 blocks"
    _said(small, [5] * 100, [[6] * 50], said + ", cache has 8 (kv_blocks)")
