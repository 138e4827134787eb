"""The ``chat.completion`` object of ``/v1/chat/completions``: the assistant's whole reply."""

from __future__ import annotations

from typing import Any

from radixflow.server.events import Final
from radixflow.server.responses.envelope import Envelope, json_bytes, usage
from radixflow.server.responses.logprobs import TokenNames, chat_logprobs, prompt_logprobs_body

KIND = "chat.completion"


def chat_completion(
    envelope: Envelope, finals: list[Final], names: TokenNames, k: int | None, prompt_k: int | None = None
) -> dict[str, Any]:
    """The body for a conversation's answers, one choice each (``n`` of them, one prompt);
    ``k``: top logprobs per token (None: no logprobs); ``prompt_k``: vLLM's ``prompt_logprobs``
    (None: not asked), once for the conversation's prompt, as vLLM returns them."""
    answered = [(f.index, f.output) for f in finals if f.output is not None]
    choices = [
        {
            "index": index,
            "message": {"role": "assistant", "content": out.text},
            "logprobs": chat_logprobs(out.logprobs or (), k, names) if k is not None else None,
            "finish_reason": out.finish_reason,
            "stop_reason": out.stop_reason,  # vLLM's: the stop string or stop token id, else null
        }
        for index, out in answered
    ]
    body = {**envelope.body(KIND, choices), "usage": usage(answered, len(finals))}  # one prompt
    scored = next((out.prompt_logprobs for _, out in answered if out.prompt_logprobs is not None), None)
    if prompt_k is not None and scored is not None:
        body["prompt_logprobs"] = prompt_logprobs_body(scored, prompt_k, names)
    return body


def encoded_chat_completion(
    envelope: Envelope, finals: list[Final], names: TokenNames, k: int | None, prompt_k: int | None
) -> bytes:
    """`chat_completion`'s body as JSON: with a long prompt's ``prompt_logprobs`` or long replies'
    ``logprobs`` it is megabytes, built and encoded beside the event loop (tens of milliseconds)."""
    return json_bytes(chat_completion(envelope, finals, names, k, prompt_k))
