"""``POST /v1/score``: candidates scored against one shared context (`LLM.score` over HTTP).

Not an OpenAI route (and not vLLM's ``/score``, which runs cross-encoders): the context is
tokenized once and each candidate on its own, joined as token ids, so every request starts with
exactly the context's tokens and the prefix cache computes it once (see `generation.scoring`).
The answer lists each candidate's log-likelihood, per token and in total, in the given order.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.requests import Request as HttpRequest

from radixflow.generation.outputs import GenerationOutput
from radixflow.generation.scoring import (
    SCORING,
    CandidateScore,
    ScoringInputError,
    candidate_scores,
    context_problem,
    refused_candidate,
    scoring_prompts,
)
from radixflow.generation.tokenizer import TextTooLong
from radixflow.generation.tracker import RequestTracker
from radixflow.problems import Problem
from radixflow.scheduler.request import Request
from radixflow.server.chat import chat_prompt
from radixflow.server.completions import prompt_ids
from radixflow.server.errors import ApiError
from radixflow.server.json_body import FastJsonRoute
from radixflow.server.protocol_tokens import ScoreRequest, check_specials_with_messages
from radixflow.server.responses.envelope import Envelope, json_bytes, usage
from radixflow.server.responses.logprobs import finite_logprob
from radixflow.server.state import ServerState
from radixflow.server.submission import answers, id_headers, response_id, while_connected

router = APIRouter(route_class=FastJsonRoute)
KIND = "score"


def prepare(body: ScoreRequest, state: ServerState) -> tuple[int, list[tuple[Request, RequestTracker]]]:
    """The context's length and one request per candidate (on a tokenizer thread: long texts
    take a while). ApiError 400 for an empty context or candidate, or one that cannot run."""
    if (body.context is None) == (body.messages is None):
        raise ApiError(400, "give exactly one of context and messages", "context")
    check_specials_with_messages(body)
    context = context_ids(body, state)
    if not body.candidates:  # a request with nothing to score is a mistake (the offline API: [])
        raise ApiError(400, "candidates: none given", "candidates")
    candidates = [candidate_ids(i, c, state) for i, c in enumerate(body.candidates)]
    try:
        prompts = scoring_prompts(context, candidates)
    except ScoringInputError as e:
        raise ApiError(400, str(e), e.problem.param) from None
    problem = context_problem(context, state.problem)
    if problem is not None:
        raise ApiError.from_problem(Problem(_context_field(body), problem.message))
    try:
        return len(context), state.requests(prompts, SCORING, body.namespace, item="candidate")
    except ApiError as e:  # said of a prompt: a scoring body's prompts are its candidates
        raise ApiError(
            e.status, _said(e.message, len(context), prompts, state), "candidates", e.code
        ) from None


def _said(message: str, context_len: int, prompts: list[list[int]], state: ServerState) -> str:
    """``message``, or where it names a candidate's prompt ("candidate 0: prompt: ..."), what the
    offline API says of it (`refused_candidate`: one sentence naming the candidate)."""
    if not message.startswith("candidate "):  # not one prompt's (more candidates than the queue)
        return message
    labelled = [(f"candidate {i}", context_len, p) for i, p in enumerate(prompts)]
    said = refused_candidate(labelled, state.problem)
    return message if said is None else str(said)


def context_ids(body: ScoreRequest, state: ServerState) -> list[int]:
    """The context's tokens (rendered from ``messages`` if given); a text too long for the model
    is a 400 of the field that was sent (the tokenizer says it of a ``prompt``)."""
    try:
        if body.messages is not None:
            return chat_prompt(body.messages, state)
        (context,) = prompt_ids(body.context, state.tokenizer, body.add_special_tokens)  # type: ignore[arg-type]
    except TextTooLong as e:
        raise ApiError.from_problem(Problem(_context_field(body), e.problem.message)) from None
    return context


def _context_field(body: ScoreRequest) -> str:
    """The field that holds the context: ``messages`` for a conversation (as the chat route names
    it), else ``context``."""
    return "context" if body.messages is None else "messages"


def candidate_ids(index: int, candidate: str | list[int], state: ServerState) -> list[int]:
    """A candidate's tokens (text without special tokens); a text too long for the model is a
    400 naming the candidate."""
    if not isinstance(candidate, str):
        return list(candidate)
    try:
        return state.tokenizer.encode(candidate, add_special_tokens=False)
    except TextTooLong as e:
        raise ApiError(400, f"candidate {index}: {e.problem.message}", "candidates") from None


def entry(score: CandidateScore) -> dict[str, Any]:
    """One candidate's answer; a logprob JSON cannot hold (-inf, NaN) is the stand-in every route
    answers (Starlette refuses it: it was a 500)."""
    return {
        "index": score.index,
        "total_logprob": finite_logprob(score.total),
        "mean_logprob": finite_logprob(score.mean),
        "token_ids": list(score.token_ids),
        "token_logprobs": [finite_logprob(lp) for lp in score.logprobs],
        "token_ranks": list(score.ranks),
        "greedy": score.greedy,
        "cached_tokens": score.cached_tokens,
    }


@router.post("/v1/score")
async def score(body: ScoreRequest, http: HttpRequest) -> Response:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    with state.admitting(max(len(body.candidates), 1)):  # a full queue or a drain refuses it now
        context_len, items = await while_connected(http, state.offload(prepare, body, state))
        submission = state.submit(items, stream=False)
    envelope = Envelope.new(response_id("score", http), state.model_name)
    finals = await answers(http, submission, item="candidate")  # as its other errors name one
    if finals is None:
        return Response(status_code=499)  # nobody reads it: the client has gone
    outputs = [f.output for f in finals if f.output is not None]
    # every candidate's tokens, logprobs and ranks (up to --max-pending candidates, each up to the
    # context long): built and encoded beside the event loop, as the other routes' entries are
    built = await state.offload(encoded_scores, envelope, context_len, outputs)
    return Response(built, media_type="application/json", headers=id_headers(envelope.id))


def encoded_scores(envelope: Envelope, context_len: int, outputs: list[GenerationOutput]) -> bytes:
    """The answer's body as JSON, for the candidates' ``outputs`` in order."""
    data = [entry(s) for s in candidate_scores(context_len, outputs)]
    body = {"id": envelope.id, "object": KIND, "created": envelope.created, "model": envelope.model}
    return json_bytes({**body, "data": data, "usage": usage(list(enumerate(outputs)))})
