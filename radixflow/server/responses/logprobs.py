"""Logprobs in OpenAI's two shapes (the legacy completion object, chat's ``content`` list) and how
tokens are named in them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from radixflow.generation.outputs import PromptTokenLogprobs, TokenLogprob
from radixflow.generation.tokenizer import TextTokenizer

NEG_INF_LOGPROB = -9999.0  # JSON has no -inf (vLLM reports the same stand-in)


def finite_logprob(value: float) -> float:
    """``value``, or the stand-in where JSON cannot hold it (-inf, NaN): every route answers it."""
    return value if math.isfinite(value) else NEG_INF_LOGPROB


class TokenNames:
    """How tokens are named in logprobs: their text, or ``token_id:N`` when asked for."""

    def __init__(self, tokenizer: TextTokenizer, as_ids: bool) -> None:
        self.tokenizer, self.as_ids = tokenizer, as_ids

    def name(self, token: int, text: str | None = None) -> str:
        if self.as_ids:
            return f"token_id:{token}"
        return self.tokenizer.token_text(token) if text is None else text

    def bytes(self, token: int) -> list[int]:
        """The token's own UTF-8 bytes, as OpenAI reports them: a token that is part of a
        character has its share of the character's bytes (its text is empty or U+FFFD)."""
        return list(self.tokenizer.token_bytes(token))

    def top(self, entry: TokenLogprob, k: int) -> dict[str, float]:
        """The ``k`` most likely tokens and the chosen one (as vLLM reports them). Two tokens with
        the same text (two halves of characters both show as U+FFFD) keep the likelier one's
        logprob; ``return_tokens_as_token_ids`` avoids the clash."""
        return self.top_of(
            [t for t, _ in entry.top[:k]],
            [lp for _, lp in entry.top[:k]],
            entry.token,
            entry.logprob,
            entry.text,
        )

    def ranked(self, token: int, logprob: float, rank: int | None, text: str | None = None) -> dict[str, Any]:
        """vLLM's ``Logprob`` object of one token: its logprob, rank and text."""
        return {"logprob": finite_logprob(logprob), "rank": rank, "decoded_token": self.name(token, text)}

    def top_of(
        self,
        ids: Sequence[int],
        logprobs: Sequence[float],
        token: int,
        logprob: float,
        text: str | None = None,
    ) -> dict[str, float]:
        """`top` from columns: ``ids`` and ``logprobs`` of the most likely tokens, best first;
        ``token`` (the chosen one, whose share of the text is ``text``) under the name its entry
        has in ``tokens``, wherever it ranks: a client finds each token in its own top entry (and
        a token inside a character, named "" there, is not taken for its U+FFFD namesakes)."""
        chosen = self.name(token, text)
        out: dict[str, float] = {}
        for t, lp in zip(ids, logprobs, strict=True):
            out.setdefault(chosen if t == token else self.name(t), finite_logprob(lp))
        out.setdefault(chosen, finite_logprob(logprob))
        return out


class CompletionLogprobs:
    """The legacy ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset."""

    def __init__(self, names: TokenNames, k: int) -> None:
        self.names, self.k = names, k
        self.tokens: list[str] = []
        self.token_logprobs: list[float | None] = []
        self.top_logprobs: list[dict[str, float] | None] = []
        self.text_offset: list[int] = []

    def add_prompt(
        self,
        prompt_ids: Sequence[int],
        texts: Sequence[str],
        scored: PromptTokenLogprobs | None,
        offset: int,
    ) -> int:
        """The echoed prompt: each token with its text and, where ``scored`` has one, its logprob
        and alternatives, read from the runner's columns (no entry object is built)."""
        names, k = self.names, self.k
        columns = scored.scored if scored is not None else None
        for position, (token, text) in enumerate(zip(prompt_ids, texts, strict=True)):
            self.tokens.append(names.name(token, text))
            row = scored.row(position) if scored is not None else None
            if columns is None or row is None:
                self.token_logprobs.append(None)
                self.top_logprobs.append(None)
            else:
                logprob = columns.logprobs[row]
                self.token_logprobs.append(finite_logprob(logprob))
                ids, lps = columns.top_ids[row][:k], columns.top_logprobs[row][:k]
                self.top_logprobs.append(names.top_of(ids, lps, token, logprob, text))
            self.text_offset.append(offset)
            offset += len(text)
        return offset

    def add(self, entries: Sequence[TokenLogprob], offset: int) -> int:
        for entry in entries:
            self.tokens.append(self.names.name(entry.token, entry.text))
            self.token_logprobs.append(finite_logprob(entry.logprob))
            self.top_logprobs.append(self.names.top(entry, self.k))
            self.text_offset.append(offset)
            offset += len(entry.text)
        return offset

    def body(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }


def prompt_logprobs_body(
    entries: Sequence[TokenLogprob | None], k: int, names: TokenNames
) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's ``prompt_logprobs``: per prompt token, None where nothing precedes it, else the
    token itself (its text in the prompt) and the ``k`` likeliest there, keyed by token id."""
    body: list[dict[str, dict[str, Any]] | None] = []
    for e in entries:
        if e is None:
            body.append(None)
            continue
        ranked = {str(e.token): names.ranked(e.token, e.logprob, e.rank, e.text)}
        for i, (token, logprob) in enumerate(e.top[:k]):
            ranked.setdefault(str(token), names.ranked(token, logprob, i + 1))
        body.append(ranked)
    return body


def chat_logprobs(entries: Sequence[TokenLogprob], k: int, names: TokenNames) -> dict[str, Any]:
    def item(token: int, text: str | None, logprob: float) -> dict[str, Any]:
        return {
            "token": names.name(token, text),
            "logprob": finite_logprob(logprob),
            "bytes": names.bytes(token),
        }

    content = []
    for e in entries:
        # the chosen token named as its own entry is, where it ranks (the greedy check compares them)
        top = [item(t, e.text if t == e.token else None, lp) for t, lp in e.top[:k]]
        content.append({**item(e.token, e.text, e.logprob), "top_logprobs": top})
    return {"content": content}
