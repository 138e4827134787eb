"""Request bodies of the OpenAI-compatible routes, and what they ask of the engine.

Unknown fields are ignored (as OpenAI clients send many); a known field asking for something the
engine does not do (several choices, penalties, logit bias, a suffix) is refused with a 400 rather
than silently ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from radixflow.generation.params import SamplingParams
from radixflow.scheduler.sampling import MAX_LOGPROBS
from radixflow.server.errors import ApiError

OPENAI_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
SEED_RANGE = (-(2**63), 2**64 - 1)


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Generate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # vLLM extension; -1 or 0: no cut
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM extension
    ignore_eos: bool = False  # vLLM extension
    skip_special_tokens: bool = True  # vLLM extension
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    cache_salt: str | None = None  # the namespace: requests with different salts never share a prefix
    user: str | None = None

    def unsupported(self) -> None:
        checks = [
            (self.n in (None, 1), "n", "n must be 1: several choices per prompt are not supported"),
            (not self.presence_penalty, "presence_penalty", "presence_penalty is not supported"),
            (not self.frequency_penalty, "frequency_penalty", "frequency_penalty is not supported"),
            (not self.logit_bias, "logit_bias", "logit_bias is not supported"),
        ]
        for ok, param, message in checks:
            if not ok:
                raise ApiError(400, message, param)

    def sampling(self, max_tokens: int, logprobs: int | None, prompt_logprobs: int | None) -> SamplingParams:
        """The request's `SamplingParams`; ApiError 400 naming the parameter when one is invalid."""
        self.unsupported()
        if self.seed is not None and not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]:
            raise ApiError(400, "seed must fit in 64 bits", "seed")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=0 if self.top_k in (None, -1) else self.top_k,  # type: ignore[arg-type]
            seed=self.seed,
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            stop=tuple(stop),
            skip_special_tokens=self.skip_special_tokens,
        )
        problem = params.problem()
        if problem is not None:
            raise ApiError.from_problem(problem)
        return params

    @property
    def namespace(self) -> str:
        # A salted namespace cannot collide with the unsalted one or another salt.
        return "default" if self.cache_salt is None else f"salt:{self.cache_salt}"

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Generate):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    suffix: str | None = None
    best_of: int | None = None
    return_tokens_as_token_ids: bool = False  # vLLM extension: "token_id:N" instead of token text

    def params(self, context: int) -> SamplingParams:
        if self.suffix:
            raise ApiError(400, "suffix is not supported", "suffix")
        if self.best_of not in (None, 1):
            raise ApiError(400, "best_of must be 1", "best_of")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ApiError(400, f"logprobs must be between 0 and {MAX_LOGPROBS}", "logprobs")
        max_tokens = OPENAI_COMPLETION_MAX_TOKENS if self.max_tokens is None else self.max_tokens
        _check_max_tokens(max_tokens, 0, context)
        prompt_logprobs = self.logprobs if self.echo else None  # echo + logprobs: the prompt's too
        return self.sampling(max_tokens, self.logprobs, prompt_logprobs)


class ChatRequest(_Generate):
    messages: list[dict[str, Any]]
    logprobs: bool = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = None
    add_generation_prompt: bool = True

    def params(self, default_max_tokens: int, context: int) -> SamplingParams:
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs set to true", "top_logprobs")
        if self.top_logprobs is not None and not 0 <= self.top_logprobs <= MAX_LOGPROBS:
            raise ApiError(400, f"top_logprobs must be between 0 and {MAX_LOGPROBS}", "top_logprobs")
        given = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        max_tokens = default_max_tokens if given is None else given
        _check_max_tokens(max_tokens, 1, context)
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        return self.sampling(max_tokens, logprobs, None)


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]


def _check_max_tokens(value: int, low: int, context: int) -> None:
    if not low <= value <= context:
        raise ApiError(
            400,
            f"max_tokens must be between {low} and the model context {context}, got {value}",
            "max_tokens",
        )
