"""The ``chat.completion.chunk`` objects of a streamed chat reply: the role first, then content."""

from __future__ import annotations

from typing import Any

from radixflow.generation.outputs import GenerationOutput, TokenLogprob
from radixflow.server.events import Delta, Final
from radixflow.server.responses.envelope import Envelope
from radixflow.server.responses.logprobs import TokenNames, chat_logprobs


def choice(
    index: int, delta: dict[str, Any], logprobs: dict[str, Any] | None, out: GenerationOutput | None = None
) -> dict[str, Any]:
    """A chunk's choice; ``out``: the finished output it ends with (None: the reply goes on)."""
    finish, stop = (None, None) if out is None else (out.finish_reason, out.stop_reason)
    return {
        "index": index,
        "delta": delta,
        "logprobs": logprobs,
        "finish_reason": finish,
        "stop_reason": stop,
    }


class ChatChunks:
    """A streamed chat reply (``n`` choices) as a `ChunkShape`; ``k``: top logprobs per token
    (None: no logprobs)."""

    kind = "chat.completion.chunk"
    prompts = 1

    def __init__(self, envelope: Envelope, names: TokenNames, k: int | None, n: int = 1) -> None:
        self.envelope, self._names, self._k, self.n = envelope, names, k, n

    def opening(self) -> list[dict[str, Any]]:
        return [choice(i, {"role": "assistant", "content": ""}, None) for i in range(self.n)]

    async def delta(self, event: Delta) -> dict[str, Any] | None:
        delta = event.delta
        if not (delta.text or (self._k is not None and delta.token_ids)):
            return None
        return choice(event.index, {"content": delta.text}, self._logprobs(delta.logprobs))

    def final(self, event: Final) -> dict[str, Any]:
        assert event.output is not None
        return choice(event.index, {}, None, event.output)

    def _logprobs(self, entries: tuple[TokenLogprob, ...] | None) -> dict[str, Any] | None:
        if self._k is None or not entries:
            return None
        return chat_logprobs(entries, self._k, self._names)
