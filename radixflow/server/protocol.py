"""Request bodies of the generation routes (``/v1/completions``, ``/v1/chat/completions``), and
what they ask of the engine; those of the routes that generate nothing are in `protocol_tokens`.

Types are strict and strings must be valid Unicode (see `strict`). Unknown fields are ignored, as
OpenAI clients send many. Known fields are implemented (declared with their types below), ignored
or refused (the tables in `refused`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, ValidatorFunctionWrapHandler, field_validator
from pydantic_core import PydanticCustomError

from radixflow.generation.params import SamplingParams, unsent_max_tokens
from radixflow.server.errors import ApiError
from radixflow.server.protocol_fields import (
    as_sent,
    check_alternatives,
    check_max_tokens,
    finite,
    key_problem,
    most_alternatives,
    token_biases,
)
from radixflow.server.refused import (
    CHAT_REFUSED,
    COMPLETION_REFUSED,
    STREAM_REFUSED,
    STRUCTURED,
)
from radixflow.server.strict import INVALID, Refused, StrictBody, declaring

OPENAI_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
# the float fields (a bias is a float too): an integer sent to one is kept (`as_sent`)
FLOAT_FIELDS = ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty")
FLOAT_FIELDS += ("repetition_penalty", "logit_bias")


class StructuredOutputs(StrictBody):
    """vLLM's ``structured_outputs``: of its kinds, only ``choice`` (as ``guided_choice``)."""

    REFUSED: ClassVar[dict[str, Refused]] = {
        "json_schema": Refused(STRUCTURED),  # sent as ``json`` (a name pydantic models keep)
        "regex": Refused(STRUCTURED),
        "grammar": Refused(STRUCTURED),
        "structural_tag": Refused(STRUCTURED),
        "json_object": Refused(STRUCTURED, (False,)),
    }

    choice: list[str] | None = None
    json_schema: Any = Field(None, alias="json")
    regex: Any = None
    grammar: Any = None
    structural_tag: Any = None
    json_object: Any = None


class StreamOptions(StrictBody):
    REFUSED: ClassVar[dict[str, Refused]] = STREAM_REFUSED

    include_usage: bool | None = False
    continuous_usage_stats: Any = None  # vLLM's: usage in every chunk


class _Generate(StrictBody):
    model: str
    n: int | None = None  # choices per prompt
    best_of: int | None = None  # only equal to n: choices are not ranked
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None  # vLLM extension
    min_p: float | None = None  # vLLM extension
    min_tokens: int | None = None  # vLLM extension
    logit_bias: dict[str, float] | None = None  # token id (as a string, JSON keys are) -> bias
    prompt_logprobs: int | None = None  # vLLM extension: each prompt token's logprob, rank, top k
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None  # vLLM extension; -1 or 0: no cut
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None  # vLLM extension
    include_stop_str_in_output: bool = False  # vLLM extension: the text ends after the stop string
    allowed_token_ids: list[int] | None = None  # vLLM extension: the only tokens that may be picked
    guided_choice: list[str] | None = None  # vLLM extension: the output is one of these strings
    bad_words: list[str] | None = None  # vLLM extension: never generated
    truncate_prompt_tokens: int | None = None  # vLLM extension: keep a prompt's last k tokens
    structured_outputs: StructuredOutputs | None = None  # vLLM's newer form (its choice only)
    ignore_eos: bool = False  # vLLM extension
    skip_special_tokens: bool = True  # vLLM extension
    return_tokens_as_token_ids: bool = False  # vLLM extension: "token_id:N" instead of token text
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None  # the namespace: requests with different salts never share a prefix
    request_id: str | None = None  # vLLM extension: the response id, unless X-Request-Id names one
    user: str | None = None  # IGNORED

    @field_validator(*FLOAT_FIELDS, mode="wrap")
    @classmethod
    def _integers_as_sent(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """An integer a float field took, kept an integer (a bias's too): `SamplingParams` takes
        either, and its refusal then quotes what was sent ("got -101", as `LLM` and the CLI say
        it), not pydantic's float of it ("got -101.0")."""
        checked = handler(value)
        if isinstance(value, dict) and isinstance(checked, dict):
            return {key: as_sent(value[key], bias) for key, bias in checked.items()}
        return as_sent(value, checked)

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _bias_keys_in_order(cls, value: Any) -> Any:
        """Each key that is no token id refused in the keys' order, before a wrong value after it
        (or its own): pydantic checks the values, which come first to it. From the first wrong
        value on, pydantic's error is the one said."""
        for key, bias in value.items() if isinstance(value, dict) else ():
            why = key_problem(key)
            if why is not None:
                raise PydanticCustomError(INVALID, "{why}", {"why": why})
            if isinstance(bias, bool) or not isinstance(bias, int | float) or not finite(bias):
                break
        return value

    def sampling(self, max_tokens: int, logprobs: int | None, prompt_logprobs: int | None) -> SamplingParams:
        """The request's `SamplingParams`; ApiError 400 naming the parameter when one is invalid.
        ``prompt_logprobs``: what the engine computes (the door's own need and the client's)."""
        k = self.prompt_logprobs
        # checked as sent: echo's logprobs may raise the count the engine computes past it
        check_alternatives("prompt_logprobs", k)
        if k is not None and self.stream:
            # as vLLM: a stream's chunks have no place for them
            raise ApiError(400, "prompt_logprobs cannot be returned in a stream", "prompt_logprobs")
        if self.stream_options is not None and not self.stream:  # as vLLM and OpenAI refuse it
            raise ApiError(400, "stream_options: only with stream: true", "stream_options")
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            top_k=0 if self.top_k in (None, -1) else self.top_k,  # type: ignore[arg-type]
            min_p=self.min_p or 0.0,
            min_tokens=self.min_tokens or 0,
            seed=self.seed,
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
            prompt_logprobs=prompt_logprobs,
            stop=tuple(stop),
            include_stop_str_in_output=self.include_stop_str_in_output,
            allowed_token_ids=None if self.allowed_token_ids is None else tuple(self.allowed_token_ids),
            guided_choice=self._choices(),
            bad_words=tuple(self.bad_words or ()),
            truncate_prompt_tokens=self.truncate_prompt_tokens,
            skip_special_tokens=self.skip_special_tokens,
            n=1 if self.n is None else self.n,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            logit_bias=token_biases(self.logit_bias or {}),
        )
        problem = params.problem()
        if problem is not None:
            raise ApiError.from_problem(problem)
        if self.best_of is not None and self.best_of != params.n:  # never dropped unsaid, on either route
            why = f"best_of must equal n ({params.n}): choices are not ranked, so none is dropped"
            raise ApiError(400, why, "best_of")
        return params

    def _choices(self) -> tuple[str, ...] | None:
        """The guided choice, sent as vLLM's older field or its newer one (not both; None:
        neither, an empty list is sent on for the check to refuse)."""
        newer = self.structured_outputs.choice if self.structured_outputs is not None else None
        if newer is not None and self.guided_choice is not None:
            why = "guided_choice and structured_outputs.choice: give the choices once"
            raise ApiError(400, why, "guided_choice")
        choices = self.guided_choice if self.guided_choice is not None else newer
        return None if choices is None else tuple(choices)

    @property
    def streamed(self) -> bool:
        return bool(self.stream)

    @property
    def namespace(self) -> str:
        return salted(self.cache_salt)

    @property
    def unsent_max_tokens(self) -> bool:
        """The client named no length limit: the default is capped per prompt to what fits."""
        return all(getattr(self, f, None) is None for f in ("max_tokens", "max_completion_tokens"))

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(declaring("_Completion", _Generate, COMPLETION_REFUSED)):  # type: ignore[misc]
    REFUSED: ClassVar[dict[str, Refused]] = COMPLETION_REFUSED

    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool | None = False
    logprobs: int | None = None
    add_special_tokens: bool = True  # vLLM extension: BOS and the like around a text prompt

    @property
    def prompt_count(self) -> int:
        """How many prompts ``prompt`` holds (a text or a token list is one), before tokenizing."""
        one = isinstance(self.prompt, str) or not self.prompt or isinstance(self.prompt[0], int)
        return 1 if one else len(self.prompt)

    def params(self, context: int) -> SamplingParams:
        check_alternatives("logprobs", self.logprobs)
        if self.max_tokens is None:  # the default, capped per prompt to what fits (`unsent_max_tokens`)
            max_tokens = unsent_max_tokens(OPENAI_COMPLETION_MAX_TOKENS, self.min_tokens)
        else:
            max_tokens = check_max_tokens(self.max_tokens, 0, context)
        echoed = self.logprobs if self.echo else None  # echo + logprobs: the prompt's too
        return self.sampling(max_tokens, self.logprobs, most_alternatives(echoed, self.prompt_logprobs))


class ChatRequest(declaring("_Chat", _Generate, CHAT_REFUSED)):  # type: ignore[misc]
    REFUSED: ClassVar[dict[str, Refused]] = CHAT_REFUSED

    messages: list[dict[str, Any]]
    logprobs: bool | None = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = None
    add_generation_prompt: bool = True  # vLLM extension
    safety_identifier: str | None = None  # IGNORED, as the rest of this group
    prompt_cache_key: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None

    def params(self, default_max_tokens: int, context: int) -> SamplingParams:
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs set to true", "top_logprobs")
        check_alternatives("top_logprobs", self.top_logprobs)  # the engine's logprobs, named as sent
        named = self.length_field
        given = getattr(self, named)
        if given is None:  # the default, capped per prompt to what fits (`unsent_max_tokens`)
            max_tokens = unsent_max_tokens(default_max_tokens, self.min_tokens)
        else:
            max_tokens = check_max_tokens(given, 1, context, named)
        logprobs = (self.top_logprobs or 0) if self.logprobs else None
        try:
            return self.sampling(max_tokens, logprobs, self.prompt_logprobs)
        except ApiError as e:  # SamplingParams' checks say max_tokens (min_tokens' limit names it)
            raise e.respelled("max_tokens", named) from None

    @property
    def length_field(self) -> str:
        """The name the client gave the length limit: OpenAI's newer one wins, as in vLLM."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"


def salted(cache_salt: str | None) -> str:
    """The cache namespace of a request with this ``cache_salt``: a salted one cannot collide with
    the unsalted one or another salt."""
    return "default" if cache_salt is None else f"salt:{cache_salt}"
