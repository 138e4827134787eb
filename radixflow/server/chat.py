"""``POST /v1/chat/completions``: messages rendered with the model's chat template, plain or streamed.

The route renders, tokenizes and submits; the answer's body is built by the module of its shape
(``responses/chat_completion.py``, or ``responses/chat_chunk.py`` when streamed).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from starlette.requests import Request as HttpRequest

from radixflow.generation.chat import ChatTemplateError
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTooLong
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.errors import ApiError
from radixflow.server.json_body import FastJsonRoute
from radixflow.server.protocol import ChatRequest
from radixflow.server.responses.chat_chunk import ChatChunks
from radixflow.server.responses.chat_completion import chat_completion, encoded_chat_completion
from radixflow.server.responses.envelope import Envelope
from radixflow.server.responses.logprobs import TokenNames
from radixflow.server.responses.stream import EventStream, sse_stream
from radixflow.server.state import ServerState
from radixflow.server.submission import answers, id_headers, response_id, while_connected

router = APIRouter(route_class=FastJsonRoute)


def chat_prompt(
    messages: list[dict[str, Any]],
    state: ServerState,
    add_generation_prompt: bool = True,
    params: SamplingParams | None = None,
) -> list[int]:
    """The conversation's prompt tokens, rendered by the model's chat template; ApiError 400 when
    the template refuses it. ``params``: the request's, which may truncate the prompt."""
    tokenizer = state.tokenizer if params is None else state.prompt_tokenizer(params)
    try:
        text = tokenizer.chat.render(messages, add_generation_prompt)
    except ChatTemplateError as e:
        raise ApiError(400, str(e), e.param) from None
    # the template writes any BOS itself; special tokens in the rendered text become their ids
    return tokenizer.encode(text, add_special_tokens=False)


def prepare(
    body: ChatRequest, state: ServerState, params: SamplingParams
) -> list[tuple[Request, RequestTracker]]:
    """Render, tokenize and check the conversation: slow for a long one, so this runs on a
    tokenizer thread. ApiError 400 when it cannot run."""
    try:
        prompt = chat_prompt(body.messages, state, body.add_generation_prompt, params)
        return state.requests([prompt], params, body.namespace, fit=body.unsent_max_tokens)
    except TextTooLong as e:
        raise _of_messages(ApiError.from_problem(e.problem)) from None
    except ApiError as e:  # the engine's checks say max_tokens
        raise _of_messages(e.respelled("max_tokens", body.length_field)) from None


def _of_messages(error: ApiError) -> ApiError:
    """An error the checks say of the ``prompt``, said of what a chat client sent for it: its
    ``messages`` (as OpenAI names it; a chat request has no prompt field)."""
    if error.param != "prompt":
        return error
    message = error.message.removeprefix("prompt: ")
    if message != error.message:
        message = f"messages: {message}"
    return ApiError(error.status, message, "messages", error.code)


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatRequest, http: HttpRequest) -> Response:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    params = body.params(state.config.default_max_tokens, state.context)
    with state.admitting(params.n):  # a full queue or a drain refuses it now, unrendered
        items = await while_connected(http, state.offload(prepare, body, state, params))
        submission = state.submit(items, body.streamed)
    envelope = Envelope.new(response_id("chatcmpl", http, body.request_id), state.model_name)
    names = TokenNames(state.tokenizer, body.return_tokens_as_token_ids)
    k = (body.top_logprobs or 0) if body.logprobs else None  # None: no logprobs
    headers = id_headers(envelope.id)
    if body.streamed:
        chunks = sse_stream(submission, ChatChunks(envelope, names, k, params.n), body.include_usage)
        return EventStream(submission, chunks, headers)
    finals = await answers(http, submission, params.n)
    if finals is None:
        return Response(status_code=499)  # nobody reads it: the client has gone
    if body.prompt_logprobs is None and k is None:
        return JSONResponse(chat_completion(envelope, finals, names, k), headers=headers)
    # a long prompt's or reply's entries take a while to build and encode: beside the event loop
    built = await state.offload(encoded_chat_completion, envelope, finals, names, k, body.prompt_logprobs)
    return Response(built, media_type="application/json", headers=headers)
