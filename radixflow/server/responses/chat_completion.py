"""The ``chat.completion`` object of ``/v1/chat/completions``: the assistant's whole reply."""

from __future__ import annotations

from typing import Any

from radixflow.server.loop import Final
from radixflow.server.responses.envelope import Envelope, usage
from radixflow.server.responses.logprobs import TokenNames, chat_logprobs

KIND = "chat.completion"


def chat_completion(
    envelope: Envelope, finals: list[Final], names: TokenNames, k: int | None
) -> dict[str, Any]:
    """The body for a conversation's one answer; ``k``: top logprobs per token (None: no logprobs)."""
    out = finals[0].output
    assert out is not None
    logprobs = chat_logprobs(out.logprobs or (), k, names) if k is not None else None
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": out.text},
        "logprobs": logprobs,
        "finish_reason": out.finish_reason,
    }
    return {**envelope.body(KIND, [choice]), "usage": usage([out])}
