"""What a caller asks to have generated: the scheduler's sampling parameters plus text-level ones."""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.problems import Problem
from radixflow.scheduler.sampling import SamplingParams as TokenSamplingParams


@dataclass(frozen=True)
class SamplingParams(TokenSamplingParams):
    """Token-level sampling (max_tokens, temperature, top_p, top_k, seed, stop_token_ids,
    ignore_eos, logprobs, prompt_logprobs: see the scheduler's `SamplingParams`) plus what only
    text can decide.

    ``stop`` ends generation at the first occurrence of any of these strings in the generated
    text, which is cut just before it (as OpenAI does); ``skip_special_tokens`` leaves special
    tokens (an end-of-sequence token, for instance) out of the text. The engine sees this object as
    its own `SamplingParams` and ignores the text fields.
    """

    stop: tuple[str, ...] = ()
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        # Accept what people type: a single string or a list; store a tuple (the object is frozen).
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))

    def problem(self) -> Problem | None:
        base = super().problem()
        if base is not None:
            return base
        if not all(isinstance(s, str) for s in self.stop):
            return Problem("stop", "must be a string or a list of strings")
        if any(s == "" for s in self.stop):
            return Problem("stop", "stop strings must not be empty")
        if not isinstance(self.skip_special_tokens, bool):
            return Problem("skip_special_tokens", f"must be true or false, got {self.skip_special_tokens!r}")
        return None
