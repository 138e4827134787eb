"""Request bodies of the routes that generate nothing: ``/v1/score`` (scores candidates),
``/tokenize`` and ``/detokenize``; the generation routes' are in `protocol`.

As every body: strict types, valid Unicode (`strict`); the template overrides they do not take
are refused (`refused.TEMPLATE_REFUSED`), and ``/v1/score`` refuses ``stream`` (it answers whole).
"""

from __future__ import annotations

from typing import Any, ClassVar

from radixflow.generation.scoring import SPECIALS_WITH_MESSAGES
from radixflow.server.errors import ApiError
from radixflow.server.protocol import salted
from radixflow.server.refused import SCORE_REFUSED, TEMPLATE_REFUSED
from radixflow.server.strict import Refused, StrictBody, declaring


class ScoreRequest(declaring("_Score", StrictBody, SCORE_REFUSED)):  # type: ignore[misc]
    """``/v1/score``: candidates (texts or token-id lists) after one context (text or ids), or
    after a conversation (``messages``, rendered up to the assistant's turn: the candidates are
    replies)."""

    REFUSED: ClassVar[dict[str, Refused]] = SCORE_REFUSED
    UNKNOWN_REFUSED: ClassVar[bool] = True  # RadixFlow's own route: a misspelt field is a mistake

    model: str
    context: str | list[int] | None = None
    messages: list[dict[str, Any]] | None = None
    # each tokenized on its own, so one list may hold both (as `LLM.score` and `score --input` take it)
    candidates: list[str | list[int]]
    add_special_tokens: bool = True  # around a text context, as /v1/completions adds them
    cache_salt: str | None = None

    @property
    def namespace(self) -> str:
        return salted(self.cache_salt)


class TokenizeRequest(declaring("_Tokenize", StrictBody, TEMPLATE_REFUSED)):  # type: ignore[misc]
    REFUSED: ClassVar[dict[str, Refused]] = TEMPLATE_REFUSED

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False


class DetokenizeRequest(StrictBody):
    model: str | None = None
    tokens: list[int]


def check_specials_with_messages(body: ScoreRequest | TokenizeRequest) -> None:
    """ApiError 400 when ``body`` asks for special tokens around a conversation: it is encoded as
    the chat route encodes it, which refuses that (the template writes them); a default left as
    it is asks for nothing."""
    asked = body.add_special_tokens and "add_special_tokens" in body.model_fields_set
    if body.messages is not None and asked:
        why = f"add_special_tokens: {SPECIALS_WITH_MESSAGES}"
        raise ApiError(400, why, "add_special_tokens")
