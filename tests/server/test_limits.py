"""What keeps one big request from stalling the others: the body limit (server/limits.py) and
tokenization on the tokenizer threads (ServerState.offload)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from server_utils import MODEL, RunningServer, running_server

from radixflow.server.json_body import FastJsonRequest, parse_json
from radixflow.server.state import DEFAULT_MAX_BODY_BYTES, ServerConfig

LIMIT = 64 * 1024
HELD = 30  # s: /health's wait while a request's work is held (the loop must answer meanwhile)


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    with running_server(ServerConfig(max_body_bytes=LIMIT, default_max_tokens=1)) as running:
        yield running


def body_of_size(size: int) -> bytes:
    """A valid completion request of exactly ``size`` bytes (an unknown field pads it)."""
    head = {"model": MODEL, "prompt": "Hello", "max_tokens": 1, "padding": ""}
    pad = size - len(json.dumps(head).encode())
    return json.dumps({**head, "padding": "x" * pad}).encode()


def chunks(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), 4096):  # no Content-Length: sent chunked
        yield body[i : i + 4096]


def test_the_default_limit_leaves_room_for_a_long_context_and_the_flag_agrees():
    from radixflow.cli import build_parser

    assert ServerConfig().max_body_bytes == DEFAULT_MAX_BODY_BYTES >= 1 << 20
    assert build_parser().parse_args(["serve", MODEL]).max_body_bytes is None  # ServerConfig's applies


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_over_the_limit_is_a_413_before_it_is_parsed(served, chunked):
    http = served.http(timeout=60)
    for size, status in [(LIMIT, 200), (LIMIT + 1, 413), (10 * LIMIT, 413)]:
        body = body_of_size(size)
        assert len(body) == size
        content = chunks(body) if chunked else body
        r = http.post("/v1/completions", content=content, headers={"content-type": "application/json"})
        assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_too_large"
    assert f"over the server's limit of {LIMIT} bytes" in error["message"]
    assert served.http().get("/health").status_code == 200


@pytest.mark.parametrize("coding", ["gzip", "br, gzip"])
def test_a_compressed_body_is_a_415_naming_its_content_encoding(served, coding):
    """A gzipped body (a client that compresses its uploads) was a 400 saying the body "holds NUL
    bytes (UTF-16 or UTF-32?)", or that some byte "is not UTF-8": about an encoding the client
    never used. Bodies are read as sent, and the limit counts the bytes that come."""
    import gzip

    body = gzip.compress(body_of_size(1000))
    headers = {"content-type": "application/json", "content-encoding": coding}
    r = served.http().post("/v1/completions", content=body, headers=headers)
    assert r.status_code == 415, r.text
    assert r.json()["error"]["message"] == (
        f"the request body must be sent uncompressed, got Content-Encoding: {coding}"
    )
    assert r.headers["accept-encoding"] == "identity"  # as RFC 7694 asks of a 415 for a coding
    as_sent = {"content-type": "application/json", "content-encoding": "identity"}
    r = served.http().post("/v1/completions", content=body_of_size(1000), headers=as_sent)
    assert r.status_code == 200, r.text
    # a request without a body is not refused for the header (a probe's, a proxy's)
    assert served.http().get("/health", headers={"content-encoding": coding}).status_code == 200


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"model": MODEL, "prompt": "Hello there", "max_tokens": 1}),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        ("/tokenize", {"prompt": "Hello there"}),
    ],
)  # fmt: skip
def test_tokenizing_runs_beside_the_event_loop(served, monkeypatch, route, body):
    """While one request's text is being tokenized (held here for as long as the test likes),
    the server keeps answering others."""
    state = served.server.state
    tokenizer = state.unbounded_tokenizer if route == "/tokenize" else state.tokenizer
    entered, release = threading.Event(), threading.Event()
    encode = tokenizer.encode

    def held(*args, **kwargs):
        entered.set()
        assert release.wait(120), "the test never released the tokenizer"
        return encode(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", held)
    answer: dict[str, httpx.Response] = {}
    client = served.http(timeout=120)
    worker = threading.Thread(target=lambda: answer.update(r=client.post(route, json=body)))
    worker.start()
    try:
        assert entered.wait(60), "the request never reached the tokenizer"
        # HELD: an event loop blocked by the held call answers nothing until it is released, so
        # any timeout tells it apart; a short one also failed a busy machine's late answer
        assert served.http(timeout=HELD).get("/health").status_code == 200  # while it is held
    finally:
        release.set()
        worker.join(120)
    assert answer["r"].status_code == 200, answer["r"].text


USER = {"role": "user", "content": "hi"}  # a chat message


@pytest.mark.parametrize(
    ("route", "body", "kind"),
    [
        ("/v1/completions", {"prompt": "Hi", "echo": True, "logprobs": 2}, "text_completion"),
        ("/v1/chat/completions", {"messages": [USER], "prompt_logprobs": 2}, "chat.completion"),
        ("/v1/completions", {"prompt": "Hi", "echo": True, "logprobs": 2, "stream": True}, "text_completion"),
        # the generated tokens' entries: n choices of up to the whole context each (they were
        # built and encoded on the event loop)
        ("/v1/completions", {"prompt": "Hi", "logprobs": 2, "max_tokens": 3}, "text_completion"),
        (
            "/v1/chat/completions",
            {"messages": [USER], "logprobs": True, "top_logprobs": 2, "max_tokens": 3},
            "chat.completion",
        ),
        # every candidate's tokens, logprobs and ranks: as long as the candidates
        ("/v1/score", {"context": "Hi", "candidates": [" a", " b"]}, "score"),
    ],
)  # fmt: skip
def test_an_answer_holding_logprob_entries_is_encoded_beside_the_event_loop(
    served, monkeypatch, route, body, kind
):
    """Such an answer is built on a tokenizer thread (megabytes for a long prompt or replies), and
    its JSON was then encoded on the event loop: 40-80 ms for one 8k-token echo, every other client
    and stream waiting. Held here while it is encoded: the server answers others meanwhile."""
    entered, release = threading.Event(), threading.Event()
    dumps = json.dumps

    def held(obj, *args, **kwargs):
        if isinstance(obj, dict) and obj.get("object") == kind:
            entered.set()
            assert release.wait(120), "the test never released the encoder"
        return dumps(obj, *args, **kwargs)

    monkeypatch.setattr(json, "dumps", held)
    answer: dict[str, httpx.Response] = {}
    client = served.http(timeout=120)
    sent = {"model": MODEL, **body}
    worker = threading.Thread(target=lambda: answer.update(r=client.post(route, json=sent)))
    worker.start()
    try:
        assert entered.wait(60), "the answer was never encoded"
        assert served.http(timeout=HELD).get("/health").status_code == 200  # while it is held
    finally:
        release.set()
        worker.join(120)
    assert answer["r"].status_code == 200, answer["r"].text
    assert f'"object":"{kind}"' in answer["r"].text.replace(" ", "")


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"model": MODEL, "prompt": "Hello there", "max_tokens": 1}),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}),
        ("/tokenize", {"prompt": "Hello there"}),
    ],
)  # fmt: skip
def test_bodies_are_parsed_by_pydantic_core_and_json_decides_the_rest(served, monkeypatch, route, body):
    """Python's JSON parser holds the event loop several times longer on a big body; it is kept
    for the bodies pydantic-core's refuses, so those are answered exactly as before."""
    calls = []
    loads = json.loads
    monkeypatch.setattr(json, "loads", lambda *a, **k: calls.append(1) or loads(*a, **k))
    http = served.http(timeout=30)
    assert http.post(route, json=body).status_code == 200
    assert calls == []
    surrogate = json.dumps({**body, "extra": "a\ud800b"}).encode()  # a lone surrogate: jiter refuses
    r = http.post(route, content=surrogate, headers={"content-type": "application/json"})
    assert calls == [1]  # before r.json(), which is this process's json.loads too
    assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"], r.text
    r = http.post(route, content=b'{"model": 1,}', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["message"], r.text


def test_parse_json_gives_what_python_json_gives():
    cases = [b'{"a": NaN, "b": -Infinity, "c": 1e999}', b'{"a": "\\ud800"}', b'\xef\xbb\xbf{"a": 1}',
             b'{"a": 18446744073709551616, "a": 0.1}', b'{"\\udc00": [1, -0.0, "\\u00e9"]}']  # fmt: skip
    for case in cases:
        assert repr(parse_json(case)) == repr(json.loads(case))
    for bad in (b'{"a": 1} x', b"[1,]", b'{"a": "x\x01"}', b"  "):
        with pytest.raises(json.JSONDecodeError) as ours:
            parse_json(bad)
        with pytest.raises(json.JSONDecodeError) as theirs:
            json.loads(bad)
        assert (ours.value.msg, ours.value.pos) == (theirs.value.msg, theirs.value.pos)


def test_an_integer_past_the_digits_python_reads_is_a_json_error_that_says_so():
    # json.loads raises a bare ValueError past 4300 digits, which FastAPI answered with "There was
    # an error parsing the body" (as it answered a body nested too deeply)
    for body in (b'{"a": [' + b"9" * 5000 + b"]}", b'{"a": "\\ud800", "b": -1' + b"0" * 4400 + b"}"):
        with pytest.raises(json.JSONDecodeError, match=r"^an integer has more than 4300 digits"):
            parse_json(body)


def test_a_body_handed_on_whole_is_taken_as_it_is_and_pieces_are_joined():
    """BodyLimit hands a body on in one message: the route reads that very object (no copy of a
    long body on the event loop); a body in pieces (another ASGI server's) is still joined."""

    def body_of(pieces: list[bytes]) -> bytes:
        messages = [{"type": "http.request", "body": b, "more_body": True} for b in pieces]
        messages[-1]["more_body"] = False

        async def receive() -> dict[str, object]:
            return messages.pop(0)

        async def read() -> bytes:
            request = FastJsonRequest({"type": "http", "method": "POST", "headers": []}, receive)
            body = await request.body()
            assert await request.body() is body
            return body

        return asyncio.run(read())

    whole = b'{"prompt": "' + b"x" * 100_000 + b'"}'
    assert body_of([whole]) is whole
    assert body_of([b'{"a": ', b"", b"[1, 2]}"]) == b'{"a": [1, 2]}'
    assert body_of([b""]) == b""


def test_no_request_is_counted_as_being_answered_once_its_answer_is_out(served):
    """Long bodies make way while the engine answers (`Answering`): every way a request ends
    (answered, streamed, left by its client mid-stream, refused) leaves nothing counted."""
    answering = served.server.state.answering
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 2}
    with served.http(timeout=60) as http:
        assert http.post("/v1/completions", json=body).status_code == 200
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
            assert r.status_code == 200 and "[DONE]" in r.read().decode()
        with http.stream("POST", "/v1/completions", json={**body, "stream": True, "max_tokens": 200}) as r:
            next(r.iter_bytes())  # then the client leaves
        assert http.post("/v1/completions", json={**body, "prompt": [10**9]}).status_code == 400
    served.wait_idle()
    deadline = time.monotonic() + 20
    while answering.count and time.monotonic() < deadline:  # the abort is seen on the event loop
        time.sleep(0.02)
    assert answering.count == 0


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()  # NaN and infinities too (Python writes them as NaN, Infinity)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES, ascii_only=st.booleans())
def test_parse_json_gives_what_python_json_gives_for_any_value(value, ascii_only):
    body = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert repr(parse_json(body)) == repr(json.loads(body))


# --------------------------------------------------------------------------- long texts
@pytest.fixture(scope="module")
def roomy(zoo) -> Iterator[RunningServer]:
    """Bodies of a megabyte; those over 64 KiB tokenized in the long lane (the defaults)."""
    with running_server(ServerConfig(max_body_bytes=1 << 20, default_max_tokens=1)) as running:
        yield running


class CountingBackend:
    """A `tokenizers.Tokenizer` that counts the texts it is asked to encode."""

    def __init__(self, backend) -> None:
        self.backend, self.encoded = backend, 0

    def encode(self, *args, **kwargs):
        self.encoded += 1
        return self.backend.encode(*args, **kwargs)

    def encode_batch(self, texts, *args, **kwargs):
        self.encoded += len(texts)
        return self.backend.encode_batch(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.backend, name)


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_a_text_longer_than_the_context_is_refused_before_it_is_tokenized(roomy, monkeypatch, route):
    state = roomy.server.state
    counting = CountingBackend(state.tokenizer._tok)
    monkeypatch.setattr(state.tokenizer, "_tok", counting)
    text = "hello world " * (state.context * 2)  # more than the context however it is tokenized
    body = (
        {"model": MODEL, "prompt": text}
        if route == "/v1/completions"
        else {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    )
    r = roomy.http(timeout=60).post(route, json=body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    field = "prompt" if route == "/v1/completions" else "messages"  # what the client sent
    assert error["param"] == field
    assert error["message"].startswith(f"{field}: has at least ")
    assert f"the model context is {state.context}" in error["message"]
    assert counting.encoded == 0  # refused from its length: the tokenizer never saw it
    fits = "hello world " * 10
    ok = roomy.http(timeout=60).post("/v1/completions", json={"model": MODEL, "prompt": fits})
    assert ok.status_code == 200 and counting.encoded == 1  # a prompt that fits is tokenized


def test_long_texts_being_tokenized_hold_up_no_short_prompt(roomy, monkeypatch):
    """As many long bodies as there are tokenizer threads, and one more, are being tokenized (held
    here); a short prompt from another client is still answered. Each long text waits for the
    others, in its own lane, not ahead of the short one."""
    state = roomy.server.state
    tokenizer = state.tokenizer
    release = threading.Event()
    encode = tokenizer.encode

    def held(text, *args, **kwargs):
        if text.startswith("HOLD"):
            assert release.wait(60), "the test never released the tokenizer"
        return encode(text, *args, **kwargs)

    offloaded = threading.Semaphore(0)
    offload = state.offload

    async def counted(fn, *args):
        offloaded.release()  # the work is handed to a thread in this same step of the event loop
        return await offload(fn, *args)

    monkeypatch.setattr(tokenizer, "encode", held)
    monkeypatch.setattr(state, "offload", counted)
    pad = "x" * (state.config.long_body_bytes + 1)
    long_body = {"model": MODEL, "prompt": "HOLD " + "word " * 100, "padding": pad}
    n_long = state.config.tokenizer_threads + 1
    answers: list[httpx.Response] = []

    def post_long() -> None:
        answers.append(roomy.http(timeout=90).post("/v1/completions", json=long_body))

    workers = [threading.Thread(target=post_long) for _ in range(n_long)]
    try:
        for worker in workers:
            worker.start()
        for _ in range(n_long):
            assert offloaded.acquire(timeout=30), "a long request never reached the tokenizer lanes"
        short = roomy.http(timeout=30).post("/v1/completions", json={"model": MODEL, "prompt": "Hello"})
        assert short.status_code == 200, short.text
        assert not release.is_set() and not answers  # answered while every long text was held
    finally:
        release.set()
        for worker in workers:
            worker.join(90)
    assert [a.status_code for a in answers] == [200] * n_long
