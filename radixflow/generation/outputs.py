"""What generation hands back per prompt (the offline API's result and the server's source)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenLogprob:
    """One token, its share of the text, its logprob and the most likely tokens there (best first)."""

    token: int
    text: str
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class GenerationOutput:
    """Everything generated for one prompt.

    ``token_ids`` are all generated tokens (an end-of-sequence token that ended the request
    included); ``text`` is their text, special tokens left out unless asked for, cut before a stop
    string. ``logprobs`` has one entry per generated token when asked for (texts joined give
    ``text``); ``prompt_logprobs`` one per prompt token, the first None (nothing precedes it).
    ``cached_tokens``: prompt tokens served from the prefix cache.
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" (EOS, stop token or stop string) or "length" (max_tokens)
    logprobs: tuple[TokenLogprob, ...] | None = None
    # on the first delta once the prompt is computed, when prompt logprobs were asked for
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    cached_tokens: int = 0
    stop_string: str | None = None  # the stop string that ended it, if one did


@dataclass(frozen=True)
class StreamDelta:
    """What a request gained since the last delta: tokens, text safe to show, their logprobs."""

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None
    # on the first delta once the prompt is computed, when prompt logprobs were asked for
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
