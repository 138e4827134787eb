"""Every request field of every route, fed bad values over HTTP: the answer is a 400 (or 413) in
OpenAI's shape naming the field, or a 200 that took the value as sent; never a 500, a coerced
value, a refused feature silently ignored, or a hang.

The fields come from the request models themselves (`model_fields`), so a field added tomorrow is
covered by this test the day it is added.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from server_utils import MODEL, RunningServer, running_server

from radixflow.server.protocol import ChatRequest, CompletionRequest
from radixflow.server.protocol_tokens import DetokenizeRequest, TokenizeRequest
from radixflow.server.state import ServerConfig
from radixflow.server.strict import StrictBody, same_json

# route -> (its request model, a body that works; each test changes one field of it)
ROUTES: dict[str, tuple[type[StrictBody], dict[str, Any]]] = {
    "/v1/completions": (CompletionRequest, {"model": MODEL, "prompt": "Hello", "max_tokens": 1}),
    "/v1/chat/completions": (
        ChatRequest,
        {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    ),
    "/tokenize": (TokenizeRequest, {"prompt": "Hello"}),
    "/detokenize": (DetokenizeRequest, {"tokens": [1, 2]}),
}
FIELDS = [(route, field) for route, (model, _) in ROUTES.items() for field in model.model_fields]

MISSING = object()
# Raw JSON, since NaN, Infinity and 1e999 (inf) have no json.dumps spelling; Python's parser,
# and so the server's, accepts them. Every field gets EVERY; hypothesis adds a few of the rest.
EVERY = [
    '"5"', "true", "1.0", "[true, false]", "{}", "null", "NaN", "1e999", "-1", "0",
    "18446744073709551616", '"a\\ud800b"', MISSING,
]  # fmt: skip
ODD = [
    '"5"', '"yes"', "true", "false", "1.0", "2.5", "[]", "{}", "[true, false]", "[1.5]", '["x"]',
    '{"a": 1}', "null", '"a\\ud800b"', '["a\\udfffb"]', '[{"role": "user", "content": "\\ud800"}]',
    "0", "0.0", "-1", "-2.5", "18446744073709551616", "1e308", "-1e308", "NaN", "Infinity",
    "-Infinity", "1e999", "-1e999",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(ODD),
    st.just(MISSING),
    # no mid-sized positive integers: a valid max_tokens of 3000 would be honoured, slowly
    st.one_of(st.integers(max_value=0), st.integers(min_value=2**31)).map(str),
    st.floats().map(lambda x: json.dumps(x)),  # NaN / Infinity spelled as Python writes them
    st.text(max_size=12).map(json.dumps),
)


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    # default_max_tokens 1: a chat request without max_tokens stays one token long
    with running_server(ServerConfig(max_pending=8, default_max_tokens=1)) as running:
        yield running


@pytest.fixture(scope="module")
def http(served) -> Iterator[httpx.Client]:
    with served.http(timeout=15) as client:  # a hang fails the test instead of stalling the run
        yield client


def raw_body(base: dict[str, Any], field: str, value: Any) -> bytes:
    """``base`` with ``field`` set to the raw JSON ``value`` (or left out for MISSING)."""
    rest = {k: v for k, v in base.items() if k != field}
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in rest.items()]
    if value is not MISSING:
        parts.append(f"{json.dumps(field)}: {value}")
    return ("{" + ", ".join(parts) + "}").encode()


def as_sent(model: type[StrictBody], body: bytes, field: str) -> Any:
    """The field's value as the server's model holds it, for the same body."""
    try:
        parsed = model.model_validate(json.loads(body))
    except ValidationError as e:  # the server answered 200 to a body its own model refuses
        pytest.fail(f"200 for a body the model refuses: {e}")
    held = getattr(parsed, field)
    return held.model_dump(exclude_unset=True) if isinstance(held, BaseModel) else held


def check_answer(route: str, field: str, value: Any, response: httpx.Response, body: bytes) -> None:
    status = response.status_code
    unknown_model = status == 404 and field == "model"  # a string naming no model served here
    said = f"{route} {field}={value}: {status} {response.text[:300]}"
    assert status in (200, 400, 413) or unknown_model, said
    if status != 200:
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        kind = "not_found_error" if unknown_model else "invalid_request_error"
        assert error["type"] == kind and "\n" not in error["message"], error
        assert error["param"] == field or field in error["message"], (field, value, error)
        return
    if route.endswith("completions") and b'"stream": true' in body:
        assert response.text.rstrip().endswith("data: [DONE]"), response.text[-300:]
    if value is MISSING:
        return  # its default
    model = ROUTES[route][0]
    sent = json.loads(value)
    refused = model.REFUSED.get(field)
    if refused is not None:  # a refused feature may only pass when its value asks for nothing
        assert refused.accepts(sent), f"{route} {field}={value} was ignored with a 200"
    held = as_sent(model, body, field)
    assert same_json(held, sent), f"{route} {field}={value} became {held!r}"


def with_every_value(test: Callable[..., None]) -> Callable[..., None]:
    for value in reversed(EVERY):
        test = example(value=value)(test)
    return test


@pytest.mark.parametrize(("route", "field"), FIELDS, ids=[f"{r}:{f}" for r, f in FIELDS])
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,  # the same values every run: a failure here is a failure everywhere
)
@with_every_value
@given(value=VALUES)
def test_a_bad_field_is_a_400_naming_it_never_a_500(http, route, field, value):
    body = raw_body(ROUTES[route][1], field, value)
    response = http.post(route, content=body, headers={"content-type": "application/json"})
    check_answer(route, field, value, response, body)


CMPL, CHAT, TOK = "/v1/completions", "/v1/chat/completions", "/tokenize"
HI = '"messages": [{"role": "user", "content": "hi"}], '
LONE = "contains a lone UTF-16 surrogate (\\ud800), which is not valid Unicode"
SAID = '"messages": [{"role": "user", "content": "\\ud800"}]'
# (route, the fields besides model, the param the 400 names, how its message starts)
AS_USERS_SENT_THEM = [
    (CMPL, '"prompt": "a\\ud800b"', "prompt", f"prompt: {LONE}"),
    (CHAT, SAID, "messages", f"messages[0].content: {LONE}"),
    (TOK, '"prompt": "a\\ud800b"', "prompt", f"prompt: {LONE}"),
    (TOK, SAID, "messages", f"messages[0].content: {LONE}"),
    (CHAT, HI + '"tools": [{"type": "function"}]', "tools", "tools: tool calling is not implemented"),
    (CHAT, HI + '"tool_choice": "required"', "tool_choice", "tool_choice: tool calling is not"),
    (CHAT, HI + '"response_format": {"type": "json_object"}', "response_format", "response_format: struct"),
    (CMPL, '"prompt": "a", "max_tokens": "5"', "max_tokens", 'max_tokens: must be an integer, got "5"'),
    (CMPL, '"prompt": "a", "max_tokens": true', "max_tokens", "max_tokens: must be an integer, got true"),
    (CMPL, '"prompt": "a", "max_tokens": 1.0', "max_tokens", "max_tokens: must be an integer, got 1.0"),
    (CMPL, '"prompt": "a", "logprobs": true', "logprobs", "logprobs: must be an integer, got true"),
    (CMPL, '"prompt": "a", "stream": "yes"', "stream", 'stream: must be true or false, got "yes"'),
    (CMPL, '"prompt": "a", "echo": "no"', "echo", 'echo: must be true or false, got "no"'),
    (CMPL, '"prompt": [true, false]', "prompt", "prompt must be a string, a list of token ids"),
    (CMPL, '"prompt": "a", "temperature": NaN', "temperature", "temperature: must be a finite number"),
    (CMPL, '"prompt": "a", "top_p": 1e999', "top_p", "top_p: must be a finite number"),
    # a number no float holds is quoted as typed, as a flag or a TOML cell quotes it (was "Infinity")
    (CMPL, '"prompt": "a", "top_p": 1e400', "top_p", "top_p: must be a finite number, got 1e400"),
    (CHAT, HI + '"temperature": -2.5E+400', "temperature",
     "temperature: must be a finite number, got -2.5E+400"),
    (CMPL, '"prompt": "a", "logit_bias": {"5": 1e400}', "logit_bias",
     "logit_bias: token 5's bias must be a finite number, got 1e400"),
    (CMPL, '"prompt": "a", "top_p": -Infinity', "top_p", "top_p: must be a finite number, got -Infinity"),
    # an integer past any float: said as LLM(temperature=10**400) says it (was "must be a number")
    (CMPL, '"prompt": "a", "temperature": 1' + "0" * 400, "temperature",
     "temperature: must be a finite number, got 100000000000...0000 (401 digits)"),
    (CMPL, '"prompt": "a", "logit_bias": {"5": -1' + "0" * 400 + "}", "logit_bias",
     "logit_bias: token 5's bias must be a finite number, got -100000000000...0000 (401 digits)"),
    (CMPL, '"prompt": "a", "stream": true, "stream_options": 5', "stream_options",
     "stream_options: must be an object, got 5"),  # was pydantic's "Input should be a valid dictionary..."
    (CMPL, '"prompt": "a", "structured_outputs": ["a"]', "structured_outputs",
     'structured_outputs: must be an object, got ["a"]'),
    # fields nobody declared are ignored, but a lone surrogate is refused anywhere in the body
    (CMPL, '"prompt": "a", "x_note": "a\\ud800b"', "x_note", f"x_note: {LONE}"),
    (CHAT, HI + '"x_meta": {"k": ["ok", "\\ud800"]}', "x_meta", f"x_meta.k[1]: {LONE}"),
    (TOK, '"prompt": "a", "x_note": "\\ud800"', "x_note", f"x_note: {LONE}"),
    (CMPL, '"prompt": "a", "\\ud800": 1', None, f"a field name: {LONE}"),
    # vLLM's fields that ask for something the server does not do were ignored with a 200
    (CHAT, HI + '"stream": true, "stream_options": {"continuous_usage_stats": true}', "stream_options",
     "stream_options.continuous_usage_stats: usage in every chunk is not implemented"),
    (CMPL, '"prompt": "a", "return_token_ids": true', "return_token_ids",
     "return_token_ids: not implemented"),
    (CHAT, HI + '"return_token_ids": true', "return_token_ids", "return_token_ids: not implemented"),
    (CMPL, '"prompt": "a", "prompt_embeds": "AAAA"', "prompt_embeds", "prompt_embeds: prompt embeddings"),
    (CHAT, HI + '"vllm_xargs": {"k": 1}', "vllm_xargs", "vllm_xargs: logits processors are not"),
    (CHAT, HI + '"moderation": {"model": "omni-moderation-latest"}', "moderation",
     "moderation: moderation is not implemented"),
]  # fmt: skip


@pytest.mark.parametrize(("route", "fields", "param", "message"), AS_USERS_SENT_THEM)
def test_what_users_sent_is_a_400_naming_the_field_and_the_connection_stays_open(
    http, route, fields, param, message
):
    body = f'{{"model": "{MODEL}", {fields}}}'.encode()
    r = http.post(route, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"].startswith(message), error
    assert error["type"] == "invalid_request_error" and "\n" not in error["message"]
    assert r.headers.get("connection") != "close"  # keep-alive: a 500 used to drop the connection
    assert http.get("/health").status_code == 200


@pytest.mark.parametrize(
    "extra",
    [
        {"tool_choice": "none"},
        {"tool_choice": "auto", "tools": []},
        {"response_format": {"type": "text"}},
        {"temperature": 1, "n": 1, "presence_penalty": 0, "logit_bias": {}},  # an int is a number
        {"user": "u-1", "metadata": {"k": "v"}, "stream_options": None, "store": False},
        {"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": False}},
        {"return_token_ids": False, "vllm_xargs": {}},
        {"prompt_cache_key": "k", "prompt_cache_retention": "24h", "prompt_cache_options": {"ttl": "30m"}},
        {"moderation": None},
        {"reasoning_effort": "none"},  # OpenAI's "no reasoning": what this server does
    ],
)
def test_values_that_ask_for_nothing_are_accepted(http, extra):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, **extra}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


def test_every_refused_field_is_declared_so_it_cannot_be_ignored():
    for model, _ in ROUTES.values():
        assert set(model.REFUSED) <= set(model.model_fields), model.__name__
    assert {r for r, _ in FIELDS} == set(ROUTES)


@pytest.mark.parametrize(
    ("params", "model"),
    [
        ("openai.types.chat.completion_create_params", ChatRequest),
        ("openai.types.completion_create_params", CompletionRequest),
    ],
)
def test_every_parameter_of_the_openai_client_is_declared(params, model):
    """What the openai client can send is implemented, ignored (cannot change the answer) or
    refused (a 400 when it asks for something), never dropped unread as an unknown field: the
    client's ``moderation`` (block unsafe output) was ignored with a 200."""
    sent = set(__import__(params, fromlist=["_"]).CompletionCreateParamsBase.__annotations__)
    assert sent - set(model.model_fields) == set()


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"])
def test_a_body_not_in_utf8_is_a_400(http, encoding):
    """JSON bodies must be UTF-8 (RFC 8259); Python's parser alone would take UTF-16 and UTF-32."""
    body = f'{{"model": "{MODEL}", "prompt": "café", "max_tokens": 1}}'.encode(encoding)
    r = http.post(CMPL, content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"].startswith("the request body must be JSON in UTF-8"), error
    assert error["type"] == "invalid_request_error" and error["param"] is None
    ok = http.post(
        CMPL, content=body.decode(encoding).encode("utf-8"), headers={"content-type": "application/json"}
    )
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("route", [CMPL, CHAT, TOK])
def test_a_json_body_sent_as_another_media_type_is_a_400_that_says_so(http, route, content_type):
    """``curl -d`` without ``-H 'Content-Type: application/json'`` sends a form: FastAPI does not
    parse it, and the 400 said the body "must be a JSON object" when it was one."""
    body = json.dumps(ROUTES[route][1]).encode()
    headers = {} if content_type is None else {"content-type": content_type}
    r = http.post(route, content=body, headers=headers)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    sent = content_type or "none"
    assert error["message"] == (
        f"the request body must be sent as JSON (Content-Type: application/json), got Content-Type: {sent}"
    ), error
    assert error["type"] == "invalid_request_error" and error["param"] is None


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@pytest.mark.parametrize("where", ["declared", "undeclared"])
def test_a_deeply_nested_value_is_checked_without_recursion(where):
    # Python's JSON parser takes bodies nested almost as deep as the recursion limit; the Unicode
    # check ran deeper in the stack, so such a body (inside messages[0]) was a RecursionError: a 500,
    # or no answer at all. Nested past the limit here, the check must still find the surrogate.
    depth = sys.getrecursionlimit() + 100
    message = {"role": "user", "content": "hi"}
    body = {"model": MODEL, "messages": [message], "max_tokens": 1}
    place = (lambda v: message.update(x=v)) if where == "declared" else (lambda v: body.update(x=v))
    place(_nested(depth, "ok"))
    ChatRequest.model_validate(body)  # valid Unicode all the way down
    place(_nested(depth, "a\ud800b"))
    with pytest.raises(ValidationError) as caught:
        ChatRequest.model_validate(body)
    (error,) = caught.value.errors()
    assert error["type"] == "surrogate"
    loc, path = (("messages",), "[0].x") if where == "declared" else ((), "x")
    assert error["loc"] == loc and error["ctx"]["path"] == path + "[0]" * depth


INTEGER_FLOATS = [
    ("temperature", -101),
    ("top_p", 5),
    ("min_p", 3),
    ("presence_penalty", -101),
    ("frequency_penalty", 7),
    ("repetition_penalty", -1),
    ("logit_bias", {"5": 1000}),
]


@pytest.mark.parametrize(("field", "value"), INTEGER_FLOATS)
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_an_integer_in_a_float_field_is_quoted_as_sent_as_the_offline_api_quotes_it(route, field, value):
    # the body's -101 was refused as "got -101.0" (pydantic made it a float first), where
    # SamplingParams (LLM, the CLI) says "got -101"
    from radixflow.generation.params import SamplingParams
    from radixflow.server.errors import ApiError

    model, base = ROUTES[route]
    body = model.model_validate_json(json.dumps({**base, field: value}))
    with pytest.raises(ApiError) as caught:
        body.params(8192) if isinstance(body, CompletionRequest) else body.params(1, 8192)
    offline = tuple((int(k), v) for k, v in value.items()) if field == "logit_bias" else value
    assert caught.value.message == SamplingParams(**{field: offline}).problem().render()
