"""What a request asks to have generated, and what comes back for each token."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

MAX_LOGPROBS = 20  # top alternatives per token a request may ask for


class FinishReason(Enum):
    STOP = "stop"  # an end-of-sequence or stop token, or a stop string seen by the caller
    LENGTH = "length"  # max_tokens generated


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each generated token. The default is one greedy token.

    ``temperature`` 0 is greedy; otherwise the distribution is scaled by ``1/temperature`` and cut
    to the ``top_k`` most likely tokens (0: no cut) and to the smallest set whose probability
    reaches ``top_p``. With a ``seed`` the tokens depend only on the seed, the model and the
    sequence so far, never on what else shares the round.
    """

    max_tokens: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # alternatives reported per generated token (None: only its own)
    prompt_logprobs: int | None = None  # None: none; k: each prompt token's logprob and top k

    def problem(self) -> str | None:
        """Why these parameters are invalid (None when they are fine). Pure."""
        checks = [
            (self.max_tokens >= 0, f"max_tokens must be >= 0, got {self.max_tokens}"),
            (math.isfinite(self.temperature) and self.temperature >= 0, "temperature must be >= 0"),
            (math.isfinite(self.top_p) and 0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p}"),
            (self.top_k >= 0, f"top_k must be >= 0, got {self.top_k}"),
            (_in_range(self.logprobs), f"logprobs must be between 0 and {MAX_LOGPROBS}"),
            (_in_range(self.prompt_logprobs), f"prompt_logprobs must be between 0 and {MAX_LOGPROBS}"),
        ]
        return next((msg for ok, msg in checks if not ok), None)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _in_range(k: int | None) -> bool:
    return k is None or 0 <= k <= MAX_LOGPROBS


@dataclass(frozen=True)
class Sample:
    """A generated token with its logprob and the most likely alternatives (best first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class PromptLogprob:
    """Logprob of the prompt token at ``position`` given the tokens before it, and the top ones."""

    position: int
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
