"""The echoed prompt's logprobs read from the runner's columns: the body entries would give."""

from __future__ import annotations

import math

import pytest

from radixflow.generation.outputs import GenerationOutput, PromptTokenLogprobs, TokenLogprob
from radixflow.scheduler.samples import PromptLogprobs
from radixflow.server.errors import ApiError, error_body
from radixflow.server.events import Final, NotAccepting
from radixflow.server.responses.envelope import usage
from radixflow.server.responses.logprobs import NEG_INF_LOGPROB, CompletionLogprobs, TokenNames, chat_logprobs
from radixflow.server.submission import failure, where

PROMPT = [5, 6, 7, 8]
TEXTS = ["The", " cat", "", " sat"]  # a token inside a character has no text of its own


class Names:
    """A tokenizer as `TokenNames` reads it: tokens 100 and 101 share a text (two halves of a
    character both show as U+FFFD)."""

    def token_text(self, token: int) -> str:
        return "\ufffd" if token in (100, 101) else f"<{token}>"

    def token_bytes(self, token: int) -> bytes:
        return bytes([token])


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
                # the prompt's own token under the name ``tokens`` gives it
                top.setdefault(names.name(t, text if t == token else None), max(v, NEG_INF_LOGPROB))
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


@pytest.mark.parametrize(
    ("index", "prompts", "n", "prefix"),
    [
        (0, 1, 1, ""),
        (2, 3, 1, "prompt 2: "),
        (1, 1, 3, "choice 1: "),
        (3, 2, 2, "prompt 1: choice 1: "),
        (4, 3, 2, "prompt 2: choice 0: "),
    ],
)
def test_an_error_names_the_prompt_and_choice_it_belongs_to(index, prompts, n, prefix):
    assert where(index, prompts, n) == prefix


def test_usage_counts_each_prompt_once_whatever_its_choices():
    def out(prompt: int, generated: int, cached: int) -> GenerationOutput:
        return GenerationOutput("r", (1,) * prompt, (2,) * generated, "", "length", cached_tokens=cached)

    # two prompts of 10 and 4 tokens, two choices each; prompt 0's second choice took 8 from the cache
    answered = [(0, out(10, 3, 0)), (1, out(10, 2, 8)), (2, out(4, 1, 4)), (3, out(4, 5, 4))]
    assert usage(answered, 2) == {
        "prompt_tokens": 14,
        "completion_tokens": 11,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 4},
    }
    assert usage(answered, 1)["prompt_tokens"] == 28  # n = 1: every output is a prompt of its own


# generated tokens 100, 101 inside one character (no text of their own, U+FFFD alone), 6 ending it
PIECES = [
    TokenLogprob(100, "", -0.5, ((100, -0.5), (101, -0.7))),
    TokenLogprob(101, "", -0.9, ((100, -0.2), (101, -0.9))),
    TokenLogprob(6, "é", -0.1, ((6, -0.1), (7, -3.0))),
]


def test_each_token_is_found_under_its_own_name_in_its_top_logprobs():
    """OpenAI's promise, which clients rely on (lm-evaluation-harness's is_greedy compares each
    token with its top entry's key): the sampled token is in ``top_logprobs`` under the name
    ``tokens`` gives it. A token inside a character is named by its share of the text there ("",
    or the character it ends), while a top entry was named by its text alone (U+FFFD): the
    token was missing from its own entry, and another half's logprob stood under the shared name."""
    names = TokenNames(Names(), False)  # type: ignore[arg-type]
    lp = CompletionLogprobs(names, 2)
    lp.add(PIECES, 0)
    body = lp.body()
    for token, top, entry in zip(body["tokens"], body["top_logprobs"], PIECES, strict=True):
        assert top[token] == entry.logprob  # its own logprob, not another half's
    tops = zip(body["tokens"], body["top_logprobs"], strict=True)
    assert [max(top, key=top.get) == token for token, top in tops] == [True, False, True]
    top_ids, top_lps = [[100, 101], [6, 7]], [[-0.5, -0.7], [-0.1, -3.0]]
    scored = PromptLogprobs([1, 2], [100, 6], [-0.5, -0.1], top_ids, top_lps)
    echoed = CompletionLogprobs(names, 2)
    echoed.add_prompt([5, 100, 6], ["a", "", "é"], PromptTokenLogprobs([5, 100, 6], scored, list), 0)
    tokens, tops = echoed.body()["tokens"], echoed.body()["top_logprobs"]
    assert [max(top, key=top.get) for top in tops[1:]] == tokens[1:] == ["", "é"]
    content = chat_logprobs(PIECES, 2, names)["content"]
    assert [c["top_logprobs"][0]["token"] == c["token"] for c in content] == [True, False, True]


class _Closed:
    """An engine loop shutting down: every admission is refused (`ServerState.admitting` asks it)."""

    def check_open(self, adding: int = 1, reading: int = 0) -> None:
        raise NotAccepting("the server is shutting down")


def test_every_refusal_of_the_server_carries_a_code_as_the_429_does():
    """A 429 said `"code": "queue_full"`, but both 503s (draining or a failed engine refusing a
    request, and an accepted one cut by the drain's end) said `"code": null`: a client backing
    off on the code read nothing. Each says `service_unavailable` now, a stream's error event too."""
    from types import SimpleNamespace

    from radixflow.server.state import Backend, ServerConfig, ServerState

    backend = Backend(
        "m", None, SimpleNamespace(max_context=64), lambda r: None, lambda n: n, lambda m: _Closed()
    )  # type: ignore[arg-type]
    state = ServerState(backend, ServerConfig(tokenizer_threads=1, long_text_threads=1))
    try:
        with pytest.raises(ApiError) as refused, state.admitting(1):
            pass
    finally:
        state.close()
    cut = failure([Final(0, None, 503, "the server shut down before this request finished")])
    streamed = error_body(503, "the server shut down before this request finished")
    codes = [refused.value.body()["error"]["code"], cut.body()["error"]["code"], streamed["error"]["code"]]
    assert codes == ["service_unavailable"] * 3
    assert failure([Final(0, None, 429, "full")]).body()["error"]["code"] == "queue_full"
