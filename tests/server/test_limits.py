"""What keeps one big request from stalling the others: the body limit (server/limits.py) and
tokenization on the tokenizer threads (ServerState.offload)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import httpx
import pytest
from server_utils import MODEL, RunningServer, running_server

from radixflow.server.state import DEFAULT_MAX_BODY_BYTES, ServerConfig

LIMIT = 64 * 1024


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
    http = served.http(timeout=10)
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
    tokenizer = served.server.state.tokenizer
    entered, release = threading.Event(), threading.Event()
    encode = tokenizer.encode

    def held(*args, **kwargs):
        entered.set()
        assert release.wait(20), "the test never released the tokenizer"
        return encode(*args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", held)
    answer: dict[str, httpx.Response] = {}
    client = served.http(timeout=30)
    worker = threading.Thread(target=lambda: answer.update(r=client.post(route, json=body)))
    worker.start()
    try:
        assert entered.wait(10), "the request never reached the tokenizer"
        assert served.http(timeout=5).get("/health").status_code == 200  # while it is held
    finally:
        release.set()
        worker.join(30)
    assert answer["r"].status_code == 200, answer["r"].text
