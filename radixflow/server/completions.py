"""``POST /v1/completions``: a prompt (text or token ids) or a list of them, plain or streamed.

Prompt text is tokenized exactly as ``/tokenize`` does it; ``echo`` returns the prompt's tokens as
that tokenization gives them, with their logprobs when ``logprobs`` is set (exact even when most
of the prompt came from the cache).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import Request as HttpRequest

from radixflow.generation.detokenize import token_texts
from radixflow.generation.outputs import GenerationOutput, StreamDelta
from radixflow.generation.params import SamplingParams
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.generation.tracker import RequestTracker
from radixflow.scheduler.request import Request
from radixflow.server.errors import error_body
from radixflow.server.loop import Delta, Final
from radixflow.server.protocol import CompletionRequest
from radixflow.server.responses import CompletionLogprobs, Envelope, TokenNames, completion_choice, usage
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


def prompt_ids(
    prompt: str | list[int] | list[str] | list[list[int]], tokenizer: TextTokenizer, special: bool = True
) -> list[list[int]]:
    """Token ids of each prompt (a list of ints is one prompt; an empty list an empty prompt);
    ``special``: the tokenizer adds its special tokens (BOS) around text."""
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt, special)]
    if not prompt or isinstance(prompt[0], int):
        return [list(prompt)]  # type: ignore[arg-type]
    return [tokenizer.encode(p, special) if isinstance(p, str) else list(p) for p in prompt]  # type: ignore[union-attr]


@dataclass(frozen=True)
class Prepared:
    prompts: list[list[int]]
    items: list[tuple[Request, RequestTracker]]


def prepare(body: CompletionRequest, state: ServerState, params: SamplingParams) -> Prepared:
    """Tokenize and check the prompts: slow for long ones, so this runs on a tokenizer thread.
    ApiError 400 for a prompt that cannot run. An echoed prompt's token texts wait for the
    answer (`CompletionView`): a request that fails or is abandoned never pays for them."""
    prompts = prompt_ids(body.prompt, state.tokenizer, body.add_special_tokens)
    return Prepared(prompts, state.requests(prompts, params, body.namespace, fit=body.unsent_max_tokens))


class CompletionView:
    """Turns outputs and deltas into choices; keeps each choice's text offset while streaming.
    A choice that echoes its prompt is built on a tokenizer thread (it detokenizes the prompt)."""

    def __init__(self, body: CompletionRequest, prepared: Prepared, tokenizer: TextTokenizer) -> None:
        self.body, self.prompts, self.tokenizer = body, prepared.prompts, tokenizer
        self.names = TokenNames(tokenizer, body.return_tokens_as_token_ids)
        self._offsets: dict[int, int] = {}  # streaming: text offset reached per choice

    def prompt_texts(self, index: int) -> list[str]:
        """Each token's share of the prompt's text (what echo returns)."""
        return token_texts(self.tokenizer, self.prompts[index])

    def echo_pending(self, index: int) -> bool:
        """The next chunk of this choice carries the echoed prompt (costly to build when long)."""
        return bool(self.body.echo) and index not in self._offsets

    def choice(self, index: int, out: GenerationOutput) -> dict[str, object]:
        text, logprobs, offset = "", None, 0
        lp = CompletionLogprobs(self.names, self.body.logprobs or 0)
        if self.body.echo:
            texts = self.prompt_texts(index)
            text = "".join(texts)
            if self.body.logprobs is not None:
                offset = lp.add_prompt(self.prompts[index], texts, out.prompt_logprobs, 0)
        if self.body.logprobs is not None:
            lp.add(out.logprobs or (), offset)
            logprobs = lp.body()
        return completion_choice(index, text + out.text, logprobs, out.finish_reason)

    def worth_sending(self, index: int, delta: StreamDelta) -> bool:
        """A chunk with text, logprobs someone asked for, or the echoed prompt; not an empty one."""
        wants_logprobs = self.body.logprobs is not None and bool(delta.token_ids)
        return bool(delta.text) or wants_logprobs or self.echo_pending(index)

    def delta_choice(self, index: int, delta: StreamDelta) -> dict[str, object]:
        first = index not in self._offsets
        offset = self._offsets.get(index, 0)
        lp = CompletionLogprobs(self.names, self.body.logprobs or 0)
        text = ""
        if first and self.body.echo:
            texts = self.prompt_texts(index)
            text = "".join(texts)
            offset = (
                lp.add_prompt(self.prompts[index], texts, delta.prompt_logprobs, offset)
                if self.body.logprobs is not None
                else offset + len(text)
            )
        offset = (
            lp.add(delta.logprobs or (), offset)
            if self.body.logprobs is not None
            else offset + len(delta.text)
        )
        self._offsets[index] = offset
        logprobs = lp.body() if self.body.logprobs is not None else None
        return completion_choice(index, text + delta.text, logprobs, None)


@router.post("/v1/completions")
async def completions(body: CompletionRequest, http: HttpRequest) -> Response:
    state: ServerState = http.app.state.radixflow
    state.check_model(body.model)
    params = body.params(state.context)
    prepared = await state.offload(prepare, body, state, params)
    submission = state.submit(prepared.items, body.streamed)
    envelope = Envelope.new(response_id("cmpl", http), state.model_name)
    view = CompletionView(body, prepared, state.tokenizer)
    headers = {"X-Request-Id": envelope.id}
    if body.streamed:
        events = _stream(state, submission, view, envelope, body.include_usage)
        return StreamingResponse(events, media_type="text/event-stream", headers=headers)
    try:
        finals = await unless_disconnected(http, submission.finals(), submission)
    except ClientGone:
        return Response(status_code=499)  # nobody reads it: the client has gone
    error = failure(finals)
    if error is not None:
        raise error
    outputs = [f.output for f in finals if f.output is not None]
    if body.echo:  # the prompts' logprob entries: as long as the prompts
        choices = await state.offload(lambda: [view.choice(f.index, f.output) for f in finals if f.output])
    else:
        choices = [view.choice(f.index, f.output) for f in finals if f.output]
    payload = {**envelope.body("text_completion", choices), "usage": usage(outputs)}
    return JSONResponse(payload, headers=headers)


async def _stream(
    state: ServerState, submission: Submission, view: CompletionView, envelope: Envelope, include_usage: bool
) -> AsyncIterator[str]:
    outputs: list[GenerationOutput] = []
    try:
        async for event in submission.events():
            if isinstance(event, Delta):
                if view.worth_sending(event.index, event.delta):
                    build = partial(view.delta_choice, event.index, event.delta)
                    choice = await state.offload(build) if view.echo_pending(event.index) else build()
                    yield sse(envelope.body("text_completion", [choice]))
                continue
            yield _final_chunk(event, view, envelope)
            if event.output is not None:
                outputs.append(event.output)
        if include_usage:
            yield sse({**envelope.body("text_completion", []), "usage": usage(outputs)})
        yield sse("[DONE]")
    finally:
        submission.abort()  # the client left mid-stream (or the stream ended: then nothing is open)


def _final_chunk(event: Final, view: CompletionView, envelope: Envelope) -> str:
    if event.output is None:
        prefix = f"prompt {event.index}: " if len(view.prompts) > 1 else ""
        return sse(error_body(event.status, prefix + (event.error or "request failed")))
    return sse(
        envelope.body(
            "text_completion", [completion_choice(event.index, "", None, event.output.finish_reason)]
        )
    )
