"""What every response body shares: its envelope (id, object, created, model) and token usage."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from radixflow.generation.outputs import GenerationOutput


@dataclass(frozen=True)
class Envelope:
    """What every body of one response shares."""

    id: str
    model: str
    created: int

    @classmethod
    def new(cls, request_id: str, model: str) -> Envelope:
        return cls(request_id, model, int(time.time()))

    def body(self, kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def usage(answered: Sequence[tuple[int, GenerationOutput]], n: int = 1) -> dict[str, Any]:
    """Token counts of the answered choices, ``(index, output)`` with index ``prompt * n +
    choice``: every choice's generated tokens, each prompt's tokens once however many of its
    choices there are (as OpenAI counts them), and its cached tokens from the choice that took
    the fewest from the cache (the others reuse what that one computed)."""
    per_prompt: dict[int, GenerationOutput] = {}
    for index, out in answered:
        seen = per_prompt.get(index // n)
        if seen is None or out.cached_tokens < seen.cached_tokens:
            per_prompt[index // n] = out
    prompt = sum(len(o.prompt_token_ids) for o in per_prompt.values())
    completion = sum(len(o.token_ids) for _, o in answered)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(o.cached_tokens for o in per_prompt.values())},
    }


def json_bytes(body: dict[str, Any]) -> bytes:
    """``body`` as JSON, encoded as Starlette's `JSONResponse` encodes it (compact, UTF-8, NaN
    refused): for a body encoded beside the event loop (a long prompt's entries are megabytes)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()
