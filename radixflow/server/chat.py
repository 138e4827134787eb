"""``POST /v1/chat/completions``: messages rendered with the model's chat template, plain or streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request as HttpRequest

from radixflow.generation.chat import ChatTemplateError
from radixflow.generation.outputs import GenerationOutput, TokenLogprob
from radixflow.generation.params import SamplingParams
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.errors import ApiError, error_body
from radixflow.server.loop import Delta
from radixflow.server.protocol import ChatRequest
from radixflow.server.responses import (
    Envelope,
    TokenNames,
    chat_choice,
    chat_chunk_choice,
    chat_logprobs,
    usage,
)
from radixflow.server.state import (
    ClientGone,
    ServerState,
    Submission,
    failure,
    response_id,
    sse,
    unless_disconnected,
)

router = APIRouter()


def chat_prompt(body: ChatRequest, state: ServerState) -> list[int]:
    tokenizer = state.tokenizer
    try:
        text = tokenizer.chat.render(body.messages, body.add_generation_prompt)
    except ChatTemplateError as e:
        raise ApiError(400, str(e), e.param) from None
    # the template writes any BOS itself; special tokens in the rendered text become their ids
    return tokenizer.encode(text, add_special_tokens=False)


def prepare(
    body: ChatRequest, state: ServerState, params: SamplingParams
) -> list[tuple[Request, RequestTracker]]:
    """Render, tokenize and check the conversation: slow for a long one, so this runs on a
    tokenizer thread. ApiError 400 when it cannot run."""
    prompt = chat_prompt(body, state)
    return state.requests([prompt], params, body.namespace, fit=body.unsent_max_tokens)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, http: HttpRequest) -> Response:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    params = body.params(state.config.default_max_tokens, state.context)
    submission = state.submit(await state.offload(prepare, body, state, params), body.streamed)
    envelope = Envelope.new(response_id("chatcmpl", http), state.model_name)
    names = TokenNames(state.tokenizer, body.return_tokens_as_token_ids)
    k = body.top_logprobs or 0
    headers = {"X-Request-Id": envelope.id}
    if body.streamed:
        chunks = _stream(submission, envelope, names, k if body.logprobs else None, body.include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
    try:
        finals = await unless_disconnected(http, submission.finals(), submission)
    except ClientGone:
        return Response(status_code=499)
    error = failure(finals)
    if error is not None:
        raise error
    out = finals[0].output
    assert out is not None
    logprobs = chat_logprobs(out.logprobs or (), k, names) if body.logprobs else None
    payload = envelope.body("chat.completion", [chat_choice(0, out, logprobs)])
    return JSONResponse({**payload, "usage": usage([out])}, headers=headers)


async def _stream(
    submission: Submission, envelope: Envelope, names: TokenNames, k: int | None, include_usage: bool
) -> AsyncIterator[str]:
    def chunk(delta: dict[str, object], entries: tuple[TokenLogprob, ...] | None, finish: str | None) -> str:
        logprobs = chat_logprobs(entries or (), k, names) if k is not None and entries else None
        return sse(envelope.body("chat.completion.chunk", [chat_chunk_choice(0, delta, logprobs, finish)]))

    outputs: list[GenerationOutput] = []
    try:
        yield chunk({"role": "assistant", "content": ""}, None, None)
        async for event in submission.events():
            if isinstance(event, Delta):
                if event.delta.text or (k is not None and event.delta.token_ids):
                    yield chunk({"content": event.delta.text}, event.delta.logprobs, None)
            elif event.output is None:
                yield sse(error_body(event.status, event.error or "request failed"))
            else:
                outputs.append(event.output)
                yield chunk({}, None, event.output.finish_reason)
        if include_usage:
            yield sse({**envelope.body("chat.completion.chunk", []), "usage": usage(outputs)})
        yield sse("[DONE]")
    finally:
        submission.abort()
