"""A request is judged by what it sent: a default the client never named fits the cache, every
token id is checked against the vocabulary, and a chat role the template does not know is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_utils import MODEL, RunningServer, running_server

from radixflow.generation.params import SamplingParams
from radixflow.options import EngineOptions
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.request import Request

# 64 blocks of 16 tokens: 1,024 tokens of KV, far below the model context (8,192)
SMALL_CACHE = EngineOptions(model=MODEL, kv_blocks=64, state_slots=16, token_budget=256)
CAPACITY = 64 * 16
BAD_IDS = [-1, 512, 1_000_000_000, 2**64]  # the tiny model's vocabulary is 0..511


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    with running_server(options=SMALL_CACHE) as running:
        yield running


@pytest.fixture(scope="module")
def http(served) -> Iterator[httpx.Client]:
    with served.http(timeout=60) as client:
        yield client


def chat_of(http: httpx.Client, words: int) -> tuple[list[dict[str, str]], int]:
    """A conversation of about ``words`` words, and its prompt's length in tokens."""
    messages = [{"role": "user", "content": "hello world " * words}]
    count = http.post("/tokenize", json={"messages": messages}).json()["count"]
    return messages, count


def test_a_chat_without_max_tokens_gets_a_default_that_fits_the_cache(http):
    messages, n = chat_of(http, 126)
    assert CAPACITY - 256 < n <= CAPACITY  # the server default (256) would not fit beside it
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= CAPACITY - n + 1


def test_a_completion_without_max_tokens_gets_a_default_that_fits_the_cache(http):
    prompt = [7] * (CAPACITY - 4)  # OpenAI's default of 16 tokens would not fit beside it
    r = http.post("/v1/completions", json={"model": MODEL, "prompt": prompt})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= 5


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_min_tokens_past_the_default_max_tokens_raises_it_as_generate_does(http, route):
    # {"min_tokens": 20} without max_tokens was refused, "min_tokens: must be an integer between
    # 0 and max_tokens (16), got 20", of a max_tokens the client never sent; `radixflow generate
    # --min-tokens 20` raises its default to 20 instead
    body = {"model": MODEL, "min_tokens": 20, "ignore_eos": True, "temperature": 0}
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    body |= {"prompt": "Hello"} if route == "/v1/completions" else chat
    r = http.post(route, json=body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 20


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_min_tokens_past_the_room_a_default_max_tokens_fits_is_refused_not_lowered(http, route):
    # the default max_tokens is capped to what fits beside the prompt; min_tokens was capped with
    # it, so {"min_tokens": 100} gave a few tokens and finish_reason "length" (vLLM: a 400)
    if route == "/v1/completions":
        prompt = {"prompt": [7] * (CAPACITY - 4)}
    else:
        messages, _ = chat_of(http, 126)
        prompt = {"messages": messages}
    body = {"model": MODEL, "min_tokens": 100, "ignore_eos": True, "temperature": 0, **prompt}
    r = http.post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "min_tokens", error
    assert re.fullmatch(
        r"min_tokens: must be at most \d+, the tokens this prompt leaves room for .*got 100", error["message"]
    )


def test_max_model_len_is_what_the_kv_cache_holds_where_it_holds_less_than_the_context(http):
    # it stated the model context (8,192) beside a cache of 1,024 tokens: a client sizing its
    # prompts to it was refused as "does not fit in the KV cache"
    (card,) = http.get("/v1/models").json()["data"]
    longest = card["max_model_len"]
    assert longest <= CAPACITY + 1  # the last token sampled is never computed: it needs no KV
    assert http.post("/tokenize", json={"model": MODEL, "prompt": "hi"}).json()["max_model_len"] == longest
    body = {"model": MODEL, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
    r = http.post("/v1/completions", json={**body, "prompt": [7] * (longest - 1)})
    assert r.status_code == 200, r.text
    r = http.post("/v1/completions", json={**body, "prompt": [7] * longest})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", r.text


def test_a_chat_prompt_too_long_for_the_cache_is_refused_as_the_messages(http):
    # a chat request has no prompt field: OpenAI names messages (vLLM names no body field)
    messages, n = chat_of(http, 140)
    assert n > CAPACITY
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": messages})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == "messages" and "max_tokens" not in error["message"], error
    assert error["message"].startswith("messages: "), error


def test_a_sent_max_tokens_that_does_not_fit_is_still_refused_as_max_tokens(http):
    messages, _ = chat_of(http, 126)
    body = {"model": MODEL, "messages": messages, "max_tokens": 300}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def generate(http: httpx.Client, route: str, **fields: Any) -> httpx.Response:
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    base: dict[str, Any] = {"prompt": "Hello"} if route == "/v1/completions" else chat
    return http.post(route, json={"model": MODEL, "max_tokens": 1, **base, **fields})


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("bad", BAD_IDS)
def test_stop_token_ids_outside_the_vocabulary_are_refused(http, route, bad):
    r = generate(http, route, stop_token_ids=[3, bad])
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "stop_token_ids" and str(bad) in error["message"]


def test_stop_token_ids_inside_the_vocabulary_are_used(http):
    assert generate(http, "/v1/completions", stop_token_ids=[0, 511]).status_code == 200


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/tokenize"])
def test_a_role_the_template_does_not_know_is_refused_naming_it(http, route):
    messages = [{"role": "system", "content": "be brief"}, {"role": "wizard", "content": "hi"}]
    r = http.post(route, json={"model": MODEL, "messages": messages, "max_tokens": 1})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages[1].role" and "'wizard'" in error["message"], error


def test_the_roles_a_template_names_are_known_and_only_those():
    from radixflow.generation.chat import ChatTemplate

    named = "{% for m in messages %}{% if m.role == 'tool' %}T{% endif %}{{ m.content }}{% endfor %}"
    assert "tool" in ChatTemplate(named, None, None).roles
    verbatim = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"
    assert set(ChatTemplate(verbatim, None, None).roles) == {"system", "user", "assistant"}


def test_the_offline_door_refuses_the_same_ids(zoo):
    from radixflow.generation.llm import LLM

    llm = LLM(MODEL, kv_blocks=64, state_slots=4)
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, stop_token_ids=(-1,)))
    with pytest.raises(ValueError, match=r"messages\[0\]\.role"):
        llm.chat([{"role": "wizard", "content": "hi"}])


def test_room_is_exactly_what_unfit_reason_lets_run():
    """The default's cap and the admission check are one rule: m tokens fit iff m <= room."""
    for config in (
        SchedulerConfig(block_size=16, num_blocks=8),
        SchedulerConfig(block_size=4, num_blocks=3, num_state_slots=0, token_budget=8),
        SchedulerConfig(block_size=4, num_blocks=3, has_recurrent=False, num_state_slots=0),
    ):
        for n in range(1, config.num_blocks * config.block_size + 3):
            room = config.room(n)
            for m in range(1, room + 3):
                req = Request("r", tuple([1] * n), sampling=SamplingParams(max_tokens=m))
                assert (config.unfit_reason(req) is None) == (m <= room), (config, n, m)


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_text_too_long_for_the_context_runs_truncated(http, route):
    # long enough that its length alone proves it is over the context (refused untokenized)
    text = "hello world " * 10_000
    base: dict[str, Any] = (
        {"prompt": text} if route == "/v1/completions" else {"messages": [{"role": "user", "content": text}]}
    )
    body = {"model": MODEL, "max_tokens": 1, **base}
    error = http.post(route, json=body).json()["error"]
    field = "prompt" if route == "/v1/completions" else "messages"  # what the client sent
    assert error["param"] == field and error["message"].startswith(f"{field}: "), error
    r = http.post(route, json=body | {"truncate_prompt_tokens": 50})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == 50


ROUTES = {"/v1/completions": "cmpl", "/v1/chat/completions": "chatcmpl"}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", list(ROUTES))
def test_the_body_request_id_names_the_response_as_vllm_does(http, route, stream):
    # vLLM: the X-Request-Id header, else the body's request_id, else a random id
    prefix = ROUTES[route]
    r = generate(http, route, request_id="job-7", stream=stream)
    assert r.status_code == 200, r.text
    assert r.headers["x-request-id"] == f"{prefix}-job-7"
    first = json.loads(r.text.split("\n")[0].removeprefix("data: ")) if stream else r.json()
    assert first["id"] == f"{prefix}-job-7"
    r = http.post(route, headers={"X-Request-Id": "from-header"}, json=json.loads(r.request.content))
    assert r.headers["x-request-id"] == f"{prefix}-from-header"  # the header wins
    r = generate(http, route)
    assert r.headers["x-request-id"].startswith(f"{prefix}-") and "job-7" not in r.headers["x-request-id"]


@pytest.mark.parametrize("value", [7, ["a"], {"a": 1}])
def test_a_request_id_that_is_not_a_string_is_refused_naming_it(http, value):
    r = generate(http, "/v1/chat/completions", request_id=value)
    assert r.status_code == 400 and r.json()["error"]["param"] == "request_id", r.text


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("rid", ["a\nb", "日本", "tab\there", "é"])
def test_a_request_id_no_header_can_carry_still_names_the_body(http, rid, stream):
    # a line break dropped the connection (uvicorn refuses the header), a character past
    # Latin-1 was a 500: the id stays the body's, and the header carries it only when it can
    r = generate(http, "/v1/completions", request_id=rid, stream=stream)
    assert r.status_code == 200, r.text
    first = json.loads(r.text.split("\n")[0].removeprefix("data: ")) if stream else r.json()
    assert first["id"] == f"cmpl-{rid}"
    carried = r.headers.get("x-request-id")
    assert carried is None or carried == f"cmpl-{rid}"


@pytest.mark.parametrize("route", list(ROUTES))
def test_best_of_other_than_n_is_refused_on_both_routes(http, route):
    # a known field that asks for ranked choices: refused, never silently dropped
    r = generate(http, route, n=2, best_of=3)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "best_of", error
    assert error["message"] == "best_of must equal n (2): choices are not ranked, so none is dropped"
    assert generate(http, route, n=2, best_of=2).status_code == 200
    assert generate(http, route, best_of=1).status_code == 200
