"""What every response body shares: its envelope (id, object, created, model) and token usage."""

from __future__ import annotations

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


def usage(outputs: Sequence[GenerationOutput]) -> dict[str, Any]:
    prompt = sum(len(o.prompt_token_ids) for o in outputs)
    completion = sum(len(o.token_ids) for o in outputs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(o.cached_tokens for o in outputs)},
    }
