"""Bad input, a full queue, clients that leave, and shutdown: every answer in OpenAI's error shape,
the engine left consistent."""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from server_utils import MODEL, RunningServer, running_server

from radixflow.server.state import ServerConfig

LONG = {"max_tokens": 3000, "temperature": 0, "ignore_eos": True}  # far longer than any test waits


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    with running_server(ServerConfig(max_pending=8)) as running:
        yield running


BAD_COMPLETIONS = [
    ("malformed JSON", b'{"model": "qwen3_5-tiny", "prompt": ', "malformed JSON body"),
    ("not an object", b"[1, 2]", "the request body must be a JSON object"),
    (  # past Python's recursion limit: FastAPI's "There was an error parsing the body"
        "nested too deeply",
        b'{"model": "qwen3_5-tiny", "prompt": "a", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "malformed JSON body: nested too deeply",
    ),
    (  # past the 4300 digits Python's JSON parser reads: FastAPI's "There was an error parsing the body"
        "an integer of 5000 digits",
        b'{"model": "qwen3_5-tiny", "prompt": "a", "max_tokens": ' + b"9" * 5000 + b"}",
        "malformed JSON body: an integer has more than 4300 digits",
    ),
    (
        "a token id of 5000 digits",
        b'{"model": "qwen3_5-tiny", "prompt": [1, -' + b"9" * 5000 + b"]}",
        "malformed JSON body: an integer has more than 4300 digits",
    ),
    ("empty prompt", {"prompt": ""}, "prompt: is empty"),
    ("empty token list", {"prompt": []}, "prompt: is empty"),
    ("one empty prompt of several", {"prompt": ["fine", ""]}, "prompt 1: is empty"),
    ("negative token id", {"prompt": [1, -1]}, "prompt: token id -1 is outside the vocabulary (0..511)"),
    (
        "token id past the vocabulary",
        {"prompt": [1, 512]},
        "prompt: token id 512 is outside the vocabulary (0..511)",
    ),
    ("mixed prompt list", {"prompt": ["text", [1, 2]]}, "prompt must be a string, a list of token ids"),
    ("prompt over the context", {"prompt": [5] * 8193}, "prompt: has 8193 tokens; the model context is 8192"),
    (  # it fits only when nothing is generated (max_tokens 0, echo)
        "prompt filling the context",
        {"prompt": [5] * 8192},
        "prompt: has 8192 tokens, the whole model context: no room to generate",
    ),
    ("one token list of several too long", {"prompt": [[5], [5] * 8192]}, "prompt 1: has 8192 tokens"),
    (  # refused before it is tokenized, and named as the token lists are
        "one text of several over the context",
        {"prompt": ["fine", "hello " * 20000]},
        "prompt 1: has at least",
    ),
    (
        "prompt plus max_tokens over the context",
        {"prompt": [5] * 8000, "max_tokens": 500},
        "max_tokens: prompt of 8000 tokens plus max_tokens 500 exceeds the model context of 8192",
    ),
    (
        "negative max_tokens",
        {"max_tokens": -1},
        "max_tokens: must be an integer >= 0, got -1",  # as SamplingParams says it
    ),
    ("huge max_tokens", {"max_tokens": 10**6}, "max_tokens: must be at most the model context (8192), got"),
    ("missing prompt", {"prompt": None}, "missing required parameter: prompt"),
    ("wrong type", {"temperature": "hot"}, 'temperature: must be a number, got "hot"'),
    ("negative temperature", {"temperature": -1}, "temperature: must be a number >= 0, got -1"),
    ("top_p out of range", {"top_p": 0}, "top_p: must be in (0, 1], got 0"),
    (  # it said "stop must be ..." where LLM's SamplingParams says "stop: must be ..."
        "stop of another type",
        {"stop": 5},
        "stop: must be a string or a list of strings, got 5",
    ),
    ("too many logprobs", {"logprobs": 21}, "logprobs: must be an integer between 0 and 20, got 21"),
    (
        "seed past 64 bits",
        {"seed": 2**64},
        f"seed: must fit in 64 bits ({-(2**63)} to {2**64 - 1}), got {2**64}",
    ),
    ("no choices", {"n": 0}, "n: must be an integer between 1 and 128, got 0"),
    (
        "best_of above n",
        {"n": 2, "best_of": 3},
        "best_of must equal n (2): choices are not ranked, so none is dropped",
    ),
    (
        "penalty out of range",
        {"presence_penalty": 2.5},
        "presence_penalty: must be a number in [-2, 2], got 2.5",
    ),
    ("logit_bias key", {"logit_bias": {"the": 1}}, "logit_bias: keys must be token ids, got 'the'"),
    # Python's int() reads these as 10 and 3: a typo biased a token nobody named
    ("logit_bias key with a separator", {"logit_bias": {"1_0": 1}}, "logit_bias: keys must be token ids"),
    ("logit_bias key in other digits", {"logit_bias": {"\u0663": 1}}, "logit_bias: keys must be token ids"),
    ("logit_bias key with spaces", {"logit_bias": {" 3": 1}}, "logit_bias: keys must be token ids"),
    (
        "logit_bias key past int()",
        {"logit_bias": {"9" * 5000: 1}},
        f"logit_bias: keys must be token ids, got '{'9' * 40}'...",
    ),
    (
        "logit_bias value",
        {"logit_bias": {"7": -101}},
        "logit_bias: token 7's bias must be a number in [-100, 100], got -101",
    ),
    # said as SamplingParams and the CLI say it, not "logit_bias.5: must be a number"
    ("logit_bias text", {"logit_bias": {"5": "x"}}, 'logit_bias: token 5\'s bias must be a number, got "x"'),
    ("logit_bias null", {"logit_bias": {"5": None}}, "logit_bias: token 5's bias must be a number, got null"),
    ("logit_bias bool", {"logit_bias": {"5": True}}, "logit_bias: token 5's bias must be a number, got true"),
    # in the keys' order, a key before its value (pydantic checked every value first)
    ("key, bad value", {"logit_bias": {"the": "x"}}, "logit_bias: keys must be token ids, got 'the'"),
    (
        "logit_bias key, then a bad value",
        {"logit_bias": {"the": 1, "5": "x"}},
        "logit_bias: keys must be token ids, got 'the'",
    ),
    (
        "logit_bias bad value, then a key",
        {"logit_bias": {"5": "x", "the": 1}},
        'logit_bias: token 5\'s bias must be a number, got "x"',
    ),
    (
        "logit_bias token",
        {"logit_bias": {"512": 1}},
        "logit_bias: token id 512 is outside the vocabulary (0..511)",
    ),
    ("min_p out of range", {"min_p": 1.5}, "min_p: must be in [0, 1], got 1.5"),
    (
        "min_tokens over max",
        {"min_tokens": 3},
        "min_tokens: must be an integer between 0 and max_tokens (2), got 3",
    ),
    ("empty stop string", {"stop": [""]}, "stop: stop strings must not be empty"),
    (  # each is searched for on every token, on the engine thread: a 4 MB body holds 700,000
        "stop strings past the limit",
        {"stop": ["a"] * 20_000},
        "stop: at most 4096 characters of stop strings in all, got 20000",
    ),
    ("empty allow-list", {"allowed_token_ids": []}, "allowed_token_ids: must be a non-empty list of ids"),
    (
        "allowed token outside the vocabulary",
        {"allowed_token_ids": [3, 512]},
        "allowed_token_ids: token id 512 is outside the vocabulary (0..511)",
    ),
    ("truncation to nothing", {"truncate_prompt_tokens": 0}, "truncate_prompt_tokens: must be an integer"),
    (  # as vLLM refuses it: no prompt that long can run
        "truncation past the context",
        {"truncate_prompt_tokens": 10**6},
        "truncate_prompt_tokens: 1000000 is more than the model context",
    ),
    ("blank bad word", {"bad_words": ["the", " "]}, "bad_words: item 1 is only whitespace"),
    ("empty choice", {"guided_choice": ["yes", ""]}, "guided_choice: item 1 is empty"),
    ("no choices", {"guided_choice": []}, "guided_choice: must not be empty"),
    ("no newer choices", {"structured_outputs": {"choice": []}}, "guided_choice: must not be empty"),
    (
        "every choice banned",
        {"guided_choice": ["yes", "no"], "bad_words": ["no", "yes"]},
        "bad_words: ban every guided_choice",
    ),
    (
        "choice and allow-list",
        {"guided_choice": ["yes"], "allowed_token_ids": [3]},
        "allowed_token_ids: cannot be combined with guided_choice",
    ),
    (
        "choices sent twice",
        {"guided_choice": ["yes"], "structured_outputs": {"choice": ["no"]}},
        "guided_choice and structured_outputs.choice: give the choices once",
    ),
    (
        "a JSON schema",
        {"structured_outputs": {"json": {"type": "object"}}},
        "structured_outputs.json: structured output is not implemented beyond guided_choice",
    ),
    (
        "too many prompt logprobs",
        {"prompt_logprobs": 21},
        "prompt_logprobs: must be an integer between 0 and 20, got 21",
    ),
    (  # vLLM's -1 (the whole vocabulary) is past the cap every logprobs field has here
        "every prompt logprob under echo",
        {"prompt_logprobs": -1, "echo": True, "logprobs": 2},
        "prompt_logprobs: must be an integer between 0 and 20, got -1",
    ),
    (
        "prompt logprobs in a stream",
        {"prompt_logprobs": 1, "stream": True},
        "prompt_logprobs cannot be returned in a stream",
    ),
    (  # as vLLM and OpenAI: the options of a stream that is not asked for are a client's mistake
        "stream options without a stream",
        {"stream_options": {"include_usage": True}},
        "stream_options: only with stream: true",
    ),
]


def body_of(case: dict[str, object] | bytes) -> bytes:
    if isinstance(case, bytes):
        return case
    base: dict[str, object] = {"model": MODEL, "prompt": "Hello", "max_tokens": 2}
    base.update(case)
    return json.dumps({k: v for k, v in base.items() if v is not None}).encode()


@pytest.mark.parametrize(("name", "case", "message"), BAD_COMPLETIONS, ids=[c[0] for c in BAD_COMPLETIONS])
def test_bad_completion_input_is_a_400_in_openai_shape(served, name, case, message):
    r = served.http().post(
        "/v1/completions", content=body_of(case), headers={"content-type": "application/json"}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["message"].startswith(message) and "\n" not in error["message"]


BAD_CHAT = [
    ("no messages", {"messages": []}, "messages must not be empty"),
    ("message without a role", {"messages": [{"content": "hi"}]}, "messages[0].role: must be a string"),
    (  # named as the chat template's own checks name a message's field, with the value sent
        "role of the wrong type",
        {"messages": [{"role": "user", "content": "hi"}, {"role": 5, "content": "x"}]},
        "messages[1].role: must be a string, got 5",
    ),
    (
        "content of the wrong type",
        {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": 5}]},
        "messages[1].content: must be a string or a list of text parts, got 5",
    ),
    ("message not an object", {"messages": ["hi"]}, 'messages[0]: must be an object, got "hi"'),
    ("zero max_tokens", {"max_tokens": 0}, "max_tokens: must be an integer >= 1, got 0"),
    (
        "zero max_completion_tokens",
        {"max_completion_tokens": 0},
        "max_completion_tokens: must be an integer >= 1, got 0",
    ),
    ("top_logprobs without logprobs", {"top_logprobs": 2}, "top_logprobs needs logprobs set to true"),
    (
        "too many top_logprobs",
        {"logprobs": True, "top_logprobs": 21},
        "top_logprobs: must be an integer between 0 and 20, got 21",
    ),
    ("prompt logprobs in a stream", {"prompt_logprobs": 0, "stream": True}, "prompt_logprobs cannot be"),
    (
        "image content",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}]},
        "messages[0].content[1]: only text content parts",
    ),
    (  # a text part after all: "only text content parts are supported" said it was not one
        "text part of a number",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "messages[0].content[0].text: must be a string, got 5",
    ),
    (
        "text part without its text",
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text: must be a string, got nothing",
    ),
]


@pytest.mark.parametrize(("name", "case", "message"), BAD_CHAT, ids=[c[0] for c in BAD_CHAT])
def test_bad_chat_input_is_a_400(served, name, case, message):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **case}
    r = served.http().post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(message), r.text
    if message.startswith("messages["):  # the param is the field the message names, or its top
        assert message.split(":")[0].startswith(r.json()["error"]["param"]), r.text


@pytest.mark.parametrize("named", ["max_tokens", "max_completion_tokens"])
def test_a_chat_length_past_the_context_is_refused_under_the_name_sent(served, named):
    """A ``max_completion_tokens`` (OpenAI's name now) that did not fit beside the prompt was
    refused as ``max_tokens``, a field the client never sent."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], named: 8190}
    r = served.http().post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == named, error
    message = error["message"]
    assert message.startswith(f"{named}: prompt of ") and f"plus {named} 8190 exceeds" in message


def test_a_limit_named_by_another_field_is_named_as_the_chat_client_sent_it(served):
    """``min_tokens`` past ``max_completion_tokens`` was refused as "between 0 and max_tokens (2)",
    naming a field the client never sent."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2}
    r = served.http().post("/v1/chat/completions", json={**body, "min_tokens": 5})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "min_tokens" and "max_completion_tokens (2)" in error["message"], error
    assert "max_tokens" not in error["message"].replace("max_completion_tokens", ""), error


@pytest.mark.parametrize(
    ("route", "body", "param", "message"),
    [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "n": 9},
            "n",
            "n = 9 choices in one request; the server queues 8",
        ),
        ("/v1/completions", {"prompt": "hi", "n": 9}, "n", "n = 9 choices in one request; the server"),
        (
            "/v1/completions",
            {"prompt": ["a", "b", "c"], "n": 3},
            "n",
            "3 prompts times n = 3 in one request; the server queues 8",
        ),
        ("/v1/completions", {"prompt": ["a"] * 9}, "prompt", "9 prompts in one request; the server queues 8"),
    ],
)
def test_more_choices_than_the_queue_takes_are_refused_naming_n(served, route, body, param, message):
    """A chat request's n past --max-pending was refused as "1 prompts times n = 9", param
    ``prompt``, a field chat requests do not have."""
    r = served.http().post(route, json={"model": MODEL, "max_tokens": 1, **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"].startswith(message), error


def test_bad_tokenizer_route_input_is_a_400(served):
    http = served.http()
    r = http.post("/detokenize", json={"tokens": [1, 600]})
    # named as every other door names the field (it said "token id 600 is ..." alone)
    assert (
        r.status_code == 400
        and r.json()["error"]["message"] == "tokens: token id 600 is outside the vocabulary (0..511)"
    )
    r = http.post("/tokenize", json={"prompt": "a", "messages": [{"role": "user", "content": "a"}]})
    assert r.status_code == 400 and "exactly one of prompt and messages" in r.json()["error"]["message"]
    # messages are encoded as the chat route does, which refuses this: it was silently ignored
    asked = {"messages": [{"role": "user", "content": "a"}], "add_special_tokens": True}
    r = http.post("/tokenize", json=asked)
    assert r.status_code == 400 and r.json()["error"]["param"] == "add_special_tokens", r.text
    assert r.json()["error"]["message"].startswith("add_special_tokens: not implemented with messages")
    assert http.post("/tokenize", json=asked | {"add_special_tokens": False}).status_code == 200
    assert http.get("/no/such/route").json()["error"]["type"] == "not_found_error"


def test_a_tokenize_prompt_of_token_ids_is_told_it_must_be_a_string(served):
    # /tokenize takes text only; its 400 listed the completion route's shapes ("a string, a list
    # of token ids, ..."), so a list of token ids was refused by a message saying it may be one
    r = served.http().post("/tokenize", json={"prompt": [1, 2]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error == {**error, "param": "prompt", "message": "prompt: must be a string, got [1, 2]"}


def test_the_openai_client_sees_the_status_and_message(served):
    with pytest.raises(openai.BadRequestError) as e:
        served.client().completions.create(model=MODEL, prompt=[1, 99999], max_tokens=1)
    assert e.value.status_code == 400
    error = e.value.response.json()["error"]
    assert error["message"] == "prompt: token id 99999 is outside the vocabulary (0..511)"
    assert error["param"] == "prompt"


ROUTE_BODIES = {
    "/v1/completions": {"prompt": "Hello", "max_tokens": 1},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    "/v1/score": {"context": "Hello", "candidates": [" a"]},
    "/tokenize": {"prompt": "Hello"},
    "/detokenize": {"tokens": [1]},
}


@pytest.mark.parametrize("route", list(ROUTE_BODIES))
def test_an_unknown_model_is_a_404_as_openai_and_vllm_answer_it(served, route):
    """The openai client raises NotFoundError for a model the server does not serve (OpenAI and
    vLLM answer 404); a 400 raised BadRequestError."""
    r = served.http().post(route, json={"model": "gpt-17", **ROUTE_BODIES[route]})
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert error == {
        "message": "model 'gpt-17' does not exist; this server serves 'qwen3_5-tiny'",
        "type": "not_found_error",
        "param": "model",
        "code": "model_not_found",
    }
    with pytest.raises(openai.NotFoundError):
        served.client().chat.completions.create(
            model="gpt-17", messages=[{"role": "user", "content": "hi"}], max_tokens=1
        )


def test_a_client_without_v1_in_its_base_url_is_told_where_the_routes_are(served):
    """``OpenAI(base_url="http://host:8000")`` (no ``/v1``) posts to ``/chat/completions``: the 404
    said "Not Found" and nothing about the path."""
    client = openai.OpenAI(base_url=served.url, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    message = caught.value.body["message"]
    assert message == "no route POST /chat/completions; did you mean /v1/chat/completions?", message


@pytest.mark.parametrize(
    ("method", "path", "status", "message"),
    [
        ("POST", "/v1/embeddings", 404, "no route POST /v1/embeddings"),
        ("GET", "/v1/completions", 405, "GET /v1/completions: this route takes POST"),
        ("POST", "/v1/models", 405, "POST /v1/models: this route takes GET, HEAD"),
        ("PUT", "/health", 405, "PUT /health: this route takes GET, HEAD"),
        # a slash too many got FastAPI's bare 307 (a body-less redirect to an http:// URL behind
        # a TLS proxy; curl without -L prints nothing): OpenAI answers 404 naming the path
        ("POST", "/v1/completions/", 404, "no route POST /v1/completions/; did you mean /v1/completions?"),
        ("GET", "/health/", 404, "no route GET /health/; did you mean /health?"),
        (
            "POST",
            "/chat/completions/",
            404,
            "no route POST /chat/completions/; did you mean /v1/chat/completions?",
        ),
    ],
)
def test_a_route_the_server_lacks_is_named_in_its_error(served, method, path, status, message):
    r = served.http().request(method, path, json={})
    assert r.status_code == status, r.text
    assert r.json()["error"]["message"] == message, r.text
    if status == 405:  # as HTTP asks of a 405: every method the route takes, HEAD included
        assert r.headers["allow"] == message.split("takes ", 1)[-1]


@pytest.mark.parametrize(
    "path", ["/health", "/version", "/metrics", "/v1/models", f"/v1/models/{MODEL}", "/tokenizer_info"]
)
def test_head_on_a_get_route_answers_as_get_without_a_body(served, path):
    """A load balancer probing ``HEAD /health`` (HAProxy's ``option httpchk HEAD``) got a 405:
    HTTP asks every server that takes GET on a resource to take HEAD on it."""
    with served.http() as http:
        got, head = http.get(path), http.head(path)
    assert (head.status_code, head.content) == (got.status_code, b""), head.text
    assert head.headers["content-type"] == got.headers["content-type"]


def test_head_on_a_post_route_is_still_a_405_naming_it(served):
    r = served.http().head("/v1/completions")
    assert (r.status_code, r.headers["allow"]) == (405, "POST")


def engine_state(served: RunningServer) -> tuple[int, int, int]:
    def look(engine):
        engine.check_integrity()
        usage = engine.cache.usage()
        return len(engine.scheduler.running), usage.locked_blocks, usage.working_slots

    return served.on_engine(look)


def wait_for_requests(served: RunningServer, n: int, timeout: float = 20.0) -> None:
    """Until the engine holds ``n`` requests (submitted from other threads)."""
    deadline = time.monotonic() + timeout
    while served.on_engine(lambda e: len(e.requests)) < n:
        assert time.monotonic() < deadline, f"the engine never held {n} requests"
        time.sleep(0.01)


def open_stream(http: httpx.Client) -> tuple[httpx.Response, Iterator[str]]:
    """A streamed completion, read until its first text chunk (so it is decoding), and the rest of
    its lines (dropping that iterator closes the connection)."""
    body = {"model": MODEL, "prompt": "The river winds through the valley", "stream": True, **LONG}
    response = http.send(http.build_request("POST", "/v1/completions", json=body), stream=True)
    assert response.status_code == 200
    lines = response.iter_lines()
    assert next(line for line in lines if line.startswith("data: "))
    return response, lines


def test_a_full_queue_answers_429_and_disconnects_free_everything(zoo):
    with running_server(ServerConfig(max_pending=2)) as served:
        clients = [served.http(timeout=30) for _ in range(2)]
        streams = [open_stream(c) for c in clients]
        assert engine_state(served)[0] == 2  # both decoding
        with pytest.raises(openai.RateLimitError) as e:
            served.client().completions.create(model=MODEL, prompt="one more", max_tokens=1)
        error = e.value.response.json()["error"]
        assert (
            e.value.status_code == 429 and error["message"] == "2 requests are queued (limit 2); retry later"
        )
        assert error["type"] == "rate_limit_error"
        for (stream, _), client in zip(streams, clients, strict=True):  # the clients leave mid-decode
            stream.close()
            client.close()
        served.wait_idle()
        assert engine_state(served) == (0, 0, 0)  # no request, lock or working slot left behind
        gauges = served.http().get("/metrics").text  # back to 0 before any other request arrives
        for name in ("running", "waiting", "pending"):
            assert f"radixflow_requests_{name} 0.0" in gauges
        r = served.client().completions.create(model=MODEL, prompt="one more", max_tokens=1)
        assert r.choices[0].finish_reason is not None  # the queue has room again
        metrics = served.http().get("/metrics").text
        assert 'radixflow_requests_total{outcome="aborted"} 2.0' in metrics
        assert 'radixflow_requests_rejected_total{reason="queue_full"} 1.0' in metrics


def test_a_full_queue_is_refused_before_anything_is_tokenized(zoo, monkeypatch):
    # a request finding the queue full was tokenized first (a long text: seconds, behind other
    # long texts in their lane) and only then told 429: the client waited for nothing, and the
    # server spent its CPU on work it threw away, when it was already overloaded
    with running_server(ServerConfig(max_pending=1)) as served:
        client = served.http(timeout=30)
        stream, _ = open_stream(client)  # the queue's one place, decoding
        tokenizer = served.server.state.tokenizer
        encoded: list[object] = []
        encode = tokenizer.encode
        monkeypatch.setattr(tokenizer, "encode", lambda *a, **k: encoded.append(a) or encode(*a, **k))
        bodies = {
            "/v1/completions": {"model": MODEL, "prompt": "one more", "max_tokens": 1},
            "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            "/v1/score": {"model": MODEL, "context": "Q: yes or no? A:", "candidates": [" yes"]},
        }
        for route, body in bodies.items():
            r = served.http().post(route, json=body)
            assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full", (route, r.text)
        assert encoded == []
        metrics = served.http().get("/metrics").text
        assert 'radixflow_requests_rejected_total{reason="queue_full"} 3.0' in metrics
        stream.close()
        client.close()


def test_a_request_whose_prompts_would_pass_the_queue_is_refused_before_it_is_tokenized(zoo, monkeypatch):
    # one place left: a request of 2 choices, or 2 prompts, or 2 candidates cannot join, which the
    # server knows before tokenizing anything
    with running_server(ServerConfig(max_pending=2)) as served:
        client = served.http(timeout=30)
        stream, _ = open_stream(client)  # one of the two places
        tokenizer = served.server.state.tokenizer
        encoded: list[object] = []
        encode = tokenizer.encode
        monkeypatch.setattr(tokenizer, "encode", lambda *a, **k: encoded.append(a) or encode(*a, **k))
        bodies = {
            "/v1/completions": {"model": MODEL, "prompt": ["one", "two"], "max_tokens": 1},
            "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "n": 2},
            "/v1/score": {"model": MODEL, "context": "Q: yes or no? A:", "candidates": [" yes", " no"]},
        }
        for route, body in bodies.items():
            r = served.http().post(route, json=body)
            assert r.status_code == 429, (route, r.text)
            said = "1 request is queued (limit 2); this one adds 2; retry later"
            assert r.json()["error"]["message"] == said
        assert encoded == []
        stream.close()
        client.close()


def test_requests_still_being_tokenized_count_against_the_queue(zoo, monkeypatch):
    # a burst of requests all passed the queue check while their prompts were still being read
    # (the queue empty), were all tokenized, and only then were all but the first told 429: on a
    # 2-core machine the tokenizer burned the engine's CPU on work it threw away
    with running_server(ServerConfig(max_pending=1)) as served:
        tokenizer = served.server.state.tokenizer
        reading, release = threading.Event(), threading.Event()
        encode = tokenizer.encode

        def held(text: str, *a: object, **k: object) -> list[int]:
            if text == "held back":
                reading.set()
                release.wait(30)
            return encode(text, *a, **k)

        monkeypatch.setattr(tokenizer, "encode", held)
        body = {"model": MODEL, "prompt": "held back", "max_tokens": 1}
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(served.http(timeout=30).post, "/v1/completions", json=body)
            assert reading.wait(30)  # its prompt is being read: nothing is queued yet
            r = served.http().post("/v1/score", json={"model": MODEL, "context": "Q:", "candidates": [" a"]})
            release.set()
            assert r.status_code == 429, r.text
            said = "0 requests are queued and 1 is being read (limit 1); retry later"
            assert r.json()["error"]["message"] == said
            assert first.result(30).status_code == 200  # the one being read runs
        r = served.http().post("/v1/completions", json={**body, "prompt": "after"})
        assert r.status_code == 200, r.text  # its place is free again


def test_a_client_that_times_out_mid_decode_aborts_its_request(served):
    body = {"model": MODEL, "prompt": "The train to Berlin leaves", **LONG}
    with pytest.raises(httpx.ReadTimeout):
        served.http(timeout=0.5).post("/v1/completions", json=body)
    served.wait_idle()
    assert engine_state(served) == (0, 0, 0)


def test_shutdown_finishes_what_it_can_and_fails_the_rest_cleanly(zoo):
    # The drain ends when the short request has its answer, not after a fixed time: a 1 s drain
    # once had to fit the 40 tokens, which a busy machine may not decode in time.
    with running_server(ServerConfig(drain_s=600.0)) as served:
        http = served.http(timeout=60)
        _, lines = open_stream(http)  # 3000 tokens: still decoding when the 40-token one is done
        short: dict[str, httpx.Response] = {}
        body = {"model": MODEL, "prompt": "Item 7: 12 units", "max_tokens": 40, "ignore_eos": True}
        short_client = served.http(timeout=60)

        def post_short() -> None:
            short["r"] = short_client.post("/v1/completions", json=body)

        worker = threading.Thread(target=post_short)
        worker.start()
        wait_for_requests(served, 2)
        served.server.should_exit = True  # what Ctrl-C does
        worker.join(60)
        served.server.state.loop.shutdown(0.0)  # the drain's end (a shorter deadline always wins)
        rest = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        engine = served.server.state.loop.engine
    assert rest[-1]["error"]["message"] == "the server shut down before this request finished"
    assert rest[-1]["error"]["type"] == "service_unavailable_error"
    assert short["r"].status_code == 200 and short["r"].json()["usage"]["completion_tokens"] == 40
    engine.check_integrity()  # the engine thread has ended: safe to look directly
    assert engine.requests == [] and not engine.has_work()


def test_serve_command_refuses_bad_setup_in_one_line(zoo, capsys):
    from radixflow.cli import main

    assert main(["serve", "gpt-17"]) == 2
    assert main(["serve", MODEL, "--token-budget", "4"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors[0].startswith("radixflow: error: model: unknown torch model 'gpt-17'")
    assert errors[1] == "radixflow: error: --token-budget: 4 is smaller than one block (block_size 16 tokens)"


def test_serve_warns_of_the_cpu_clock_by_the_threads_it_will_run(zoo, capsys, monkeypatch):
    """The spin-wait warning of ``--clock cpu`` counts the server's own thread plan (one torch
    thread on 2 CPUs), not torch's default of one thread per CPU."""
    import os

    import radixflow.server.serve
    from radixflow.cli import main
    from radixflow.cli import serve as serve_command

    class Server:
        engine_left = False  # its engine thread ended with it

        def run(self, sockets: list[object]) -> None:
            return None

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(serve_command, "cpu_count", lambda: 2)
    monkeypatch.setattr(radixflow.server.serve, "build_server", lambda *args: Server())
    assert main(["serve", MODEL, "--clock", "cpu", "--port", "0"]) == 0
    assert "OMP_WAIT_POLICY" not in capsys.readouterr().err
    assert main(["serve", MODEL, "--clock", "cpu", "--port", "0", "--torch-threads", "2"]) == 0
    assert "clock cpu with 2 torch threads" in capsys.readouterr().err


def test_serve_startup_line_counts_one_thread_in_the_singular(zoo, capsys, monkeypatch):
    # it said "(1 torch threads, 1 tokenizer threads; ...)"
    import radixflow.server.serve
    from radixflow.cli import main

    class Server:
        engine_left = False

        def run(self, sockets: list[object]) -> None:
            return None

    monkeypatch.setattr(radixflow.server.serve, "build_server", lambda *args: Server())
    argv = ["serve", MODEL, "--port", "0", "--torch-threads", "1", "--tokenizer-threads", "1"]
    assert main(argv) == 0
    assert "(1 torch thread, 1 tokenizer thread; round predictor from " in capsys.readouterr().err


def test_serve_startup_line_gives_an_ipv6_address_in_brackets(zoo, capsys, monkeypatch):
    # --host ::1 printed "http://::1:8000/v1", a URL nothing can open (the port reads as part of
    # the address); an IPv6 literal goes in brackets
    import radixflow.server.serve
    from radixflow.cli import main

    class Server:
        engine_left = False

        def run(self, sockets: list[object]) -> None:
            return None

    monkeypatch.setattr(radixflow.server.serve, "build_server", lambda *args: Server())
    assert main(["serve", MODEL, "--host", "::1", "--port", "0"]) == 0
    line = capsys.readouterr().err
    assert re.search(r"on http://\[::1\]:\d+/v1 ", line), line


def test_detokenize_takes_every_id_the_model_has_where_its_embedding_is_padded(zoo, tmp_path):
    """A model whose embedding is padded past its tokenizer's last id (as Qwen's are) takes and
    generates those ids: a prompt of them ran, and ``return_tokens_as_token_ids`` can hand one out.
    /detokenize alone refused them, 'token id 515 is outside the vocabulary (0..511)', a
    vocabulary the completions route (0..519) did not know. Each door now names the model's."""
    import shutil
    from dataclasses import replace

    import torch
    from safetensors.torch import load_file, save_file
    from server_utils import OPTIONS

    from radixflow.models.zoo import ensure_model

    ckpt = tmp_path / "padded"
    shutil.copytree(ensure_model(MODEL), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["vocab_size"] += 8
    (ckpt / "config.json").write_text(json.dumps(config))
    state = load_file(str(ckpt / "model.safetensors"))
    embed = state["model.embed_tokens.weight"]  # tied: the output head too
    state["model.embed_tokens.weight"] = torch.cat([embed, torch.zeros(8, embed.shape[1])])
    save_file(state, str(ckpt / "model.safetensors"), {"format": "pt"})
    with running_server(options=replace(OPTIONS, model=str(ckpt))) as running:
        http = running.http()
        name = str(ckpt)
        ran = http.post("/v1/completions", json={"model": name, "prompt": [67, 515], "max_tokens": 1})
        assert ran.status_code == 200, ran.text
        r = http.post("/detokenize", json={"model": name, "tokens": [67, 515]})
        assert r.status_code == 200 and r.json() == {"prompt": "a"}, r.text
        past = (
            http.post("/detokenize", json={"model": name, "tokens": [67, 520]}),
            http.post("/v1/completions", json={"model": name, "prompt": [67, 520], "max_tokens": 1}),
        )
        for r in past:
            assert r.status_code == 400, r.text
            assert "token id 520 is outside the vocabulary (0..519)" in r.text, r.text
