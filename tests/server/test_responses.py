"""The echoed prompt's logprobs read from the runner's columns: the body entries would give."""

from __future__ import annotations

import math

import pytest

from radixflow.generation.outputs import PromptTokenLogprobs, TokenLogprob
from radixflow.scheduler.sampling import PromptLogprobs
from radixflow.server.responses.logprobs import NEG_INF_LOGPROB, CompletionLogprobs, TokenNames

PROMPT = [5, 6, 7, 8]
TEXTS = ["The", " cat", "", " sat"]  # a token inside a character has no text of its own


class Names:
    """A tokenizer as `TokenNames` reads it: tokens 100 and 101 share a text (two halves of a
    character both show as U+FFFD)."""

    def token_text(self, token: int) -> str:
        return "\ufffd" if token in (100, 101) else f"<{token}>"


def reference(names: TokenNames, k: int, entries: list[TokenLogprob | None]) -> dict[str, object]:
    """The body as it was built from one entry object per prompt position."""
    body: dict[str, list[object]] = {
        "tokens": [],
        "token_logprobs": [],
        "top_logprobs": [],
        "text_offset": [],
    }
    offset = 0
    for token, text, entry in zip(PROMPT, TEXTS, entries, strict=True):
        body["tokens"].append(names.name(token, text))
        body["token_logprobs"].append(None if entry is None else max(entry.logprob, NEG_INF_LOGPROB))
        top: dict[str, float] | None = None
        if entry is not None:
            top = {}
            for t, v in (*entry.top[:k], (entry.token, entry.logprob)):
                top.setdefault(names.name(t), max(v, NEG_INF_LOGPROB))
        body["top_logprobs"].append(top)
        body["text_offset"].append(offset)
        offset += len(text)
    return body


@pytest.mark.parametrize("as_ids", [False, True])
@pytest.mark.parametrize("k", [0, 1, 3])
def test_prompt_logprobs_from_columns_equal_the_entry_built_body(k, as_ids):
    scored = PromptLogprobs(
        [1, 2, 3],
        PROMPT[1:],
        [-0.25, -math.inf, -2.0],
        [[100, 101, 6], [7, 100, 9], [8, 1, 2]],
        [[-0.1, -0.2, -0.25], [-0.3, -0.4, -0.5], [-2.0, -3.0, -4.0]],
    )
    lazy = PromptTokenLogprobs(PROMPT, scored, lambda: TEXTS)
    names = TokenNames(Names(), as_ids)  # type: ignore[arg-type]
    lp = CompletionLogprobs(names, k)
    assert lp.add_prompt(PROMPT, TEXTS, lazy, 0) == len("".join(TEXTS))
    assert lp.body() == reference(names, k, list(lazy))
    assert lp.body()["token_logprobs"][2] == NEG_INF_LOGPROB  # JSON has no -inf


def test_a_prompt_without_logprobs_echoes_tokens_and_offsets_only():
    lp = CompletionLogprobs(TokenNames(Names(), False), 2)  # type: ignore[arg-type]
    assert lp.add_prompt(PROMPT, TEXTS, None, 7) == 7 + len("".join(TEXTS))
    assert lp.body()["token_logprobs"] == [None] * 4 and lp.body()["text_offset"] == [7, 10, 14, 14]
