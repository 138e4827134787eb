"""The runner interface: the one place the engine meets an executor (simulated or real)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request


@dataclass(frozen=True)
class ModelInfo:
    name: str
    has_recurrent: bool  # any non-attention sequence mixer (its state needs checkpoints)
    vocab_size: int
    max_context: int


@dataclass
class RoundResult:
    tokens: dict[str, int]  # request id -> generated token, for every chunk with sample=True
    duration_s: float  # how far the round advances the engine clock
    worker_call_s: float  # time spent in the worker call itself (modelled or measured)
    top_logprobs: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


class Runner(Protocol):
    name: str
    model: ModelInfo

    def validate(self, request: Request) -> str | None:
        """Why the request cannot run on this model (None if it can). Pure."""
        ...

    def run(self, batch: SchedulerOutput) -> RoundResult:
        """Execute one round: compute every chunk, write KV and snapshots into the pools."""
        ...

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        """Each request's token from a run without any cache (None: no independent reference)."""
        ...


def validate_prompt(request: Request, model: ModelInfo) -> str | None:
    """Checks every runner applies before a request is queued."""
    if not request.prompt:
        return "empty prompt"
    if len(request.prompt) >= model.max_context:
        return f"prompt has {len(request.prompt)} tokens; model context is {model.max_context}"
    bad = next((t for t in request.prompt if not 0 <= t < model.vocab_size), None)
    if bad is not None:
        return f"token id {bad} is outside the vocabulary (0..{model.vocab_size - 1})"
    return None
