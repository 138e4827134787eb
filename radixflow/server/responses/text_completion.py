"""The ``text_completion`` object of ``/v1/completions``: whole, or as the chunks of a stream
(the same shape, one choice per chunk).

``echo`` returns the prompt's tokens as the tokenizer split it, with their logprobs when
``logprobs`` is set (exact even when most of the prompt came from the cache); vLLM's
``prompt_logprobs`` returns them in vLLM's shape, on each choice. Building an echoed prompt's texts
is slow for a long prompt: it runs on a tokenizer thread, and only once the answer is there, so a
request that fails or is abandoned never pays for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from radixflow.generation.detokenize import token_texts
from radixflow.generation.outputs import GenerationOutput, PromptTokenLogprobs, StreamDelta
from radixflow.generation.tokenizer import TextTokenizer
from radixflow.server.events import Delta, Final
from radixflow.server.protocol import CompletionRequest
from radixflow.server.responses.envelope import Envelope, json_bytes, usage
from radixflow.server.responses.logprobs import CompletionLogprobs, TokenNames, prompt_logprobs_body
from radixflow.server.responses.stream import Framed, chunk_event

KIND = "text_completion"
Offload = Callable[..., Awaitable[Any]]  # runs ``fn(*args)`` on a tokenizer thread


def choice(
    index: int, text: str, logprobs: dict[str, Any] | None, out: GenerationOutput | None = None
) -> dict[str, Any]:
    """A choice; ``out``: the finished output it ends with (None: a stream's delta, unfinished)."""
    finish, stop = (None, None) if out is None else (out.finish_reason, out.stop_reason)
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish, "stop_reason": stop}


class TextCompletion:
    """One request's ``text_completion``: its whole body (`body`) or its stream's chunks (a
    `ChunkShape`); while streaming, it keeps each choice's text offset."""

    kind = KIND

    def __init__(
        self,
        body: CompletionRequest,
        prompts: list[list[int]],
        tokenizer: TextTokenizer,
        envelope: Envelope,
        offload: Offload,
    ) -> None:
        self.envelope, self.prompts, self.n = envelope, len(prompts), body.n or 1
        self._prompt_ids, self._tokenizer, self._offload = prompts, tokenizer, offload
        self._echo, self._k, self._prompt_k = bool(body.echo), body.logprobs, body.prompt_logprobs
        self._names = TokenNames(tokenizer, body.return_tokens_as_token_ids)
        self._offsets: dict[int, int] = {}  # streaming: text offset reached per choice

    async def encoded(self, finals: list[Final]) -> bytes:
        """The whole response for these answers (each has its output), as JSON."""
        answered = [(f.index, f.output) for f in finals if f.output is not None]

        def whole() -> bytes:
            choices = [self._choice(index, out) for index, out in answered]
            return json_bytes({**self.envelope.body(KIND, choices), "usage": usage(answered, self.n)})

        # logprob entries are as long as the prompts (echo) or the outputs (n choices of up to
        # the context each): built and encoded (tens of milliseconds for 8k tokens) beside the
        # event loop
        long = self._echo or self._prompt_k is not None or self._k is not None
        return await self._offload(whole) if long else whole()

    def opening(self) -> list[dict[str, Any]]:
        return []

    async def delta(self, event: Delta) -> dict[str, Any] | Framed | None:
        """A chunk with text, logprobs someone asked for, or the echoed prompt (framed beside the
        event loop); not an empty one."""
        index, delta = event.index, event.delta
        echo_pending = self._echo and index not in self._offsets
        if not (delta.text or (self._k is not None and delta.token_ids) or echo_pending):
            return None
        if echo_pending:  # costly to build and encode when the prompt is long
            return await self._offload(self._framed_delta, index, delta)
        return self._delta_choice(index, delta)

    def _framed_delta(self, index: int, delta: StreamDelta) -> Framed:
        return Framed(chunk_event(self.envelope, KIND, self._delta_choice(index, delta)))

    def final(self, event: Final) -> dict[str, Any]:
        assert event.output is not None
        return choice(event.index, "", None, event.output)

    def _choice(self, index: int, out: GenerationOutput) -> dict[str, Any]:
        lp = CompletionLogprobs(self._names, self._k or 0)
        text, offset = self._echoed(index, lp, out.prompt_logprobs, 0) if self._echo else ("", 0)
        if self._k is not None:
            lp.add(out.logprobs or (), offset)
        logprobs = lp.body() if self._k is not None else None
        body = choice(index, text + out.text, logprobs, out)
        if self._prompt_k is not None and out.prompt_logprobs is not None:
            body["prompt_logprobs"] = prompt_logprobs_body(out.prompt_logprobs, self._prompt_k, self._names)
        return body

    def _delta_choice(self, index: int, delta: StreamDelta) -> dict[str, Any]:
        first = index not in self._offsets
        offset = self._offsets.get(index, 0)
        lp = CompletionLogprobs(self._names, self._k or 0)
        text = ""
        if first and self._echo:
            text, offset = self._echoed(index, lp, delta.prompt_logprobs, offset)
        if self._k is not None:
            offset = lp.add(delta.logprobs or (), offset)
        else:
            offset += len(delta.text)
        self._offsets[index] = offset
        logprobs = lp.body() if self._k is not None else None
        return choice(index, text + delta.text, logprobs)

    def _echoed(
        self, index: int, lp: CompletionLogprobs, scored: PromptTokenLogprobs | None, offset: int
    ) -> tuple[str, int]:
        """The echoed prompt's text and the text offset after it; its logprobs go into ``lp``."""
        ids = self._prompt_ids[index // self.n]
        texts = token_texts(self._tokenizer, ids)
        text = "".join(texts)
        if self._k is None:
            return text, offset + len(text)
        return text, lp.add_prompt(ids, texts, scored, offset)
