"""``POST /v1/completions``: a prompt (text or token ids) or a list of them, plain or streamed.

Prompt text is tokenized exactly as ``/tokenize`` does it. The route checks, tokenizes and submits;
the answer's body is `TextCompletion`'s to build (``responses/text_completion.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.requests import Request as HttpRequest

from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer, TextTooLong
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.errors import ApiError
from radixflow.server.json_body import FastJsonRoute
from radixflow.server.protocol import CompletionRequest
from radixflow.server.responses.envelope import Envelope
from radixflow.server.responses.stream import EventStream, sse_stream
from radixflow.server.responses.text_completion import TextCompletion
from radixflow.server.state import ServerState
from radixflow.server.submission import answers, id_headers, response_id, while_connected

router = APIRouter(route_class=FastJsonRoute)


def prompt_ids(
    prompt: str | list[int] | list[str] | list[list[int]], tokenizer: TextTokenizer, special: bool = True
) -> list[list[int]]:
    """Token ids of each prompt (a list of ints is one prompt; an empty list an empty prompt);
    ``special``: the tokenizer adds its special tokens (BOS) around text."""
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt, special)]
    if not prompt or isinstance(prompt[0], int):
        return [list(prompt)]  # type: ignore[arg-type]
    named = len(prompt) > 1
    return [
        _encoded(i, p, tokenizer, special, named) if isinstance(p, str) else list(p)
        for i, p in enumerate(prompt)  # type: ignore[arg-type]
    ]


def _encoded(index: int, text: str, tokenizer: TextTokenizer, special: bool, named: bool) -> list[int]:
    """Prompt ``index``'s tokens; a text too long for the context is a 400 naming which prompt it
    is (``named``: one of several), as a token list too long is named."""
    try:
        return tokenizer.encode(text, special)
    except TextTooLong as e:
        if not named:
            raise
        raise ApiError.from_problem(e.problem, f"prompt {index}") from None


@dataclass(frozen=True)
class Prepared:
    prompts: list[list[int]]
    items: list[tuple[Request, RequestTracker]]


def prepare(body: CompletionRequest, state: ServerState, params: SamplingParams) -> Prepared:
    """Tokenize and check the prompts: slow for long ones, so this runs on a tokenizer thread.
    ApiError 400 for a prompt that cannot run."""
    prompts = prompt_ids(body.prompt, state.prompt_tokenizer(params), body.add_special_tokens)
    items = state.requests(prompts, params, body.namespace, fit=body.unsent_max_tokens)
    ran = [list(req.prompt) for req, _ in items[:: params.n]]  # as truncated: an echo shows what ran
    return Prepared(ran, items)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, http: HttpRequest) -> Response:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    params = body.params(state.context)
    with state.admitting(body.prompt_count * params.n):  # a full queue or a drain refuses it now
        prepared = await while_connected(http, state.offload(prepare, body, state, params))
        submission = state.submit(prepared.items, body.streamed)
    envelope = Envelope.new(response_id("cmpl", http, body.request_id), state.model_name)
    shape = TextCompletion(body, prepared.prompts, state.tokenizer, envelope, state.offload)
    headers = id_headers(envelope.id)
    if body.streamed:
        return EventStream(submission, sse_stream(submission, shape, body.include_usage), headers)
    finals = await answers(http, submission, params.n)
    if finals is None:
        return Response(status_code=499)  # nobody reads it: the client has gone
    return Response(await shape.encoded(finals), media_type="application/json", headers=headers)
