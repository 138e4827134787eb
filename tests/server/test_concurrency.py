"""`radixflow serve` under what real clients do at once: leaving mid-way, sharing a prefix,
reading slowly, being scraped. After each scenario the engine and its cache hold nothing and
pass their integrity checks. Every wait is on a condition, with a generous deadline."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from server_utils import HTTP_TIMEOUT_S, MODEL, RunningServer, running_server

import radixflow.server.completions as completions
import radixflow.server.tokenize as tokenize
from radixflow.server.state import ServerConfig

DEADLINE_S = HTTP_TIMEOUT_S  # against a hang on a loaded machine (busy CI: load 20), never a speed test


@pytest.fixture(scope="module")
def served(zoo) -> Iterator[RunningServer]:
    with running_server(ServerConfig(max_pending=64)) as running:
        yield running


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def sample(running: RunningServer, name: str, labels: dict[str, str] | None = None) -> float:
    value = running.server.state.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


def outcomes(running: RunningServer) -> dict[str, float]:
    names = ("finished", "aborted", "failed")
    return {o: sample(running, "radixflow_requests_total", {"outcome": o}) for o in names}


def counted(running: RunningServer, before: dict[str, float], n: int) -> dict[str, float]:
    """The outcomes counted since ``before``, once ``n`` requests have been (each once)."""
    wait_for(lambda: sum(outcomes(running).values()) >= sum(before.values()) + n, f"{n} counted")
    after = outcomes(running)
    return {o: after[o] - before[o] for o in after}


def assert_nothing_held(running: RunningServer) -> None:
    """The engine is idle, its cache holds no lock nor working slot, every gauge is back at 0."""
    running.wait_idle()
    usage = running.on_engine(lambda e: e.cache.usage())
    assert (usage.locked_blocks, usage.working_slots) == (0, 0)
    running.on_engine(lambda e: e.check_integrity())
    wait_for(lambda: sample(running, "radixflow_requests_pending") == 0, "nothing pending")
    gauges = [sample(running, f"radixflow_requests_{g}") for g in ("running", "waiting")]
    assert gauges == [0, 0]


def raw_post(running: RunningServer, path: str, body: dict) -> socket.socket:
    """A connection that has sent ``body`` and reads nothing (the test closes it when it likes)."""
    data = json.dumps(body).encode()
    host, port = running.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def connections(running: RunningServer) -> int:
    return len(running.server.server_state.connections)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_whose_client_left_while_its_prompt_was_tokenized_is_never_submitted(
    served, monkeypatch, stream
):
    """A client that gives up while its prompt is being tokenized (a stream before it started):
    its request must not be generated in full for nobody; it is dropped once tokenized."""
    entered, gate = threading.Event(), threading.Event()
    prepare = completions.prepare

    def held(*args):
        entered.set()
        assert gate.wait(DEADLINE_S)
        return prepare(*args)

    monkeypatch.setattr(completions, "prepare", held)
    before = outcomes(served)
    open_before = connections(served)
    sock = raw_post(served, "/v1/completions", long_body(stream, prompt="hello there"))
    assert entered.wait(DEADLINE_S)
    sock.close()  # gone while its prompt is tokenized: before the response starts
    wait_for(lambda: connections(served) == open_before, "the server saw the client leave")
    gate.set()
    wait_for(lambda: served.server.state._reading == 0, "the handler is done with it")
    assert served.on_engine(lambda e: e.requests) == []  # after any admission it made
    assert outcomes(served) == before
    assert_nothing_held(served)


@contextmanager
def engine_held(running: RunningServer) -> Iterator[threading.Event]:
    """The engine thread held between rounds until the yielded gate is set (or the block ends):
    what clients send meanwhile queues up as commands, in order, and no round runs."""
    entered, gate = threading.Event(), threading.Event()

    def hold(_engine) -> None:
        entered.set()
        assert gate.wait(DEADLINE_S)

    done = running.server.state.loop.ask(hold)
    assert entered.wait(DEADLINE_S)
    try:
        yield gate
    finally:
        gate.set()
        done.result(DEADLINE_S)


@contextmanager
def round_held(running: RunningServer) -> Iterator[tuple[threading.Event, threading.Event]]:
    """The next worker call held until the gate is set: (entered, gate)."""
    runner = running.server.state.loop.engine.runner
    entered, gate = threading.Event(), threading.Event()
    run = runner.run

    def held(batch):
        if not entered.is_set():
            entered.set()
            assert gate.wait(DEADLINE_S)
        return run(batch)

    runner.run = held
    try:
        yield entered, gate
    finally:
        gate.set()
        del runner.run  # the class's own again


def answering(running: RunningServer) -> int:
    """Submissions the server still answers (a client's leaving ends its own at once)."""
    return running.server.state.answering.count


def chat_body(stream: bool, **more) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "The river winds"}], "max_tokens": 400}
    return {**body, "ignore_eos": True, "temperature": 0, "stream": stream, **more}


def long_body(stream: bool, **more) -> dict:
    body = {"model": MODEL, "prompt": "The river winds", "max_tokens": 400, "ignore_eos": True}
    return {**body, "temperature": 0, "stream": stream, **more}


ENGINE_ROUTES = {
    "completion": ("/v1/completions", long_body(False)),
    "completion stream": ("/v1/completions", long_body(True)),
    "chat n=2": ("/v1/chat/completions", chat_body(False, n=2)),
    "chat stream n=2": ("/v1/chat/completions", chat_body(True, n=2)),
    "score": ("/v1/score", {"model": MODEL, "context": "The river", "candidates": [" winds", " bends"]}),
}


@pytest.mark.parametrize("route", ENGINE_ROUTES)
def test_a_client_that_leaves_while_its_request_is_queued_is_aborted_before_it_runs(served, route):
    path, body = ENGINE_ROUTES[route]
    choices = body.get("n", len(body.get("candidates", [0])))
    before, tokens = outcomes(served), sample(served, "radixflow_generation_tokens_total")
    with engine_held(served):
        sock = raw_post(served, path, body)
        wait_for(lambda: answering(served) == 1, "the request was submitted")
        sock.close()
        wait_for(lambda: answering(served) == 0, "the server saw the client leave")
    assert counted(served, before, choices) == {"finished": 0, "aborted": choices, "failed": 0}
    assert_nothing_held(served)
    assert sample(served, "radixflow_generation_tokens_total") == tokens  # none ever ran


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_stream_whose_client_left_before_it_started_is_aborted(served, path):
    """Under an ASGI server of spec 2.4 (a send to a client gone raises OSError; uvicorn's is 2.3),
    a client that left after its prompt was tokenized failed its stream's first send: the
    stream's generator never started, so the abort in its `finally` never ran and the request
    generated all its tokens for nobody. The app is called as such a server calls it."""
    body = json.dumps(long_body(True) if "chat" not in path else chat_body(True)).encode()
    before = outcomes(served)
    loop = served.server._aio
    assert loop is not None
    asyncio.run_coroutine_threadsafe(_gone_at_first_send(served, path, body), loop).result(DEADLINE_S)
    assert counted(served, before, 1) == {"finished": 0, "aborted": 1, "failed": 0}
    assert_nothing_held(served)


async def _gone_at_first_send(running: RunningServer, path: str, body: bytes) -> None:
    """``body`` posted to the app as an ASGI 2.4 server posts it, its client gone at the first send."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # no disconnect is told: the send finds it
        return {}

    async def send(message: dict) -> None:
        raise OSError("the client is gone")  # as uvicorn's ClientDisconnected under spec 2.4

    with contextlib.suppress(Exception):
        await running.server.config.app(scope, receive, send)


def test_a_stream_cut_mid_decode_is_aborted_and_counted_once(served):
    before = outcomes(served)
    with served.http() as http, http.stream("POST", "/v1/completions", json=long_body(True)) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data: {")), "no first chunk"
    assert counted(served, before, 1) == {"finished": 0, "aborted": 1, "failed": 0}
    assert_nothing_held(served)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_leaving_in_the_round_its_request_finishes_is_counted_finished_once(served, stream):
    before = outcomes(served)
    with round_held(served) as (entered, _):
        sock = raw_post(served, "/v1/completions", long_body(stream, max_tokens=1))
        assert entered.wait(DEADLINE_S)  # its one round is in its worker call
        sock.close()
        wait_for(lambda: answering(served) == 0, "the server saw the client leave")
    assert counted(served, before, 1) == {"finished": 1, "aborted": 0, "failed": 0}
    assert_nothing_held(served)


def stream_events(lines: Iterator[str]) -> Iterator[dict]:
    """The JSON events of a stream's lines, up to ``[DONE]``."""
    for line in lines:
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line.removeprefix("data: "))


def test_a_stream_of_n_choices_cut_after_one_ended_aborts_only_the_other(served):
    # seed 3: choice 0 meets the stop string at its third token, choice 1 runs all 400
    body = long_body(True, n=2, temperature=1.0, seed=3, stop=["%"])
    before = outcomes(served)
    with served.http() as http, http.stream("POST", "/v1/completions", json=body) as r:
        events = stream_events(r.iter_lines())
        ended = next(c["choices"][0] for e in events for c in [e] if c["choices"][0]["finish_reason"])
        assert (ended["index"], ended["finish_reason"]) == (0, "stop")
        with engine_held(served):  # choice 1 runs no further round until its client has left
            r.close()
            wait_for(lambda: answering(served) == 0, "the server saw the client leave")
    assert counted(served, before, 2) == {"finished": 1, "aborted": 1, "failed": 0}
    assert_nothing_held(served)


def test_clients_sharing_a_prefix_are_answered_exactly_when_others_leave_mid_round(served):
    # six on one prefix longer than a round's token budget, submitted together (one computes the
    # prefix, the others wait on its checkpoint); the first three leave while the first round runs
    prefix = "Reranking models score each candidate document against the same query. " * 8
    bodies = [long_body(False, prompt=prefix + f"Candidate {i}.", max_tokens=8) for i in range(6)]
    with served.http() as http:
        alone = [http.post("/v1/completions", json={**b, "cache_salt": "alone"}) for b in bodies[3:]]
    before = outcomes(served)
    with round_held(served) as (entered, gate), ThreadPoolExecutor(3) as pool:
        with engine_held(served):
            leavers = [raw_post(served, "/v1/completions", b) for b in bodies[:3]]
            wait_for(lambda: answering(served) == 3, "the leavers were submitted")
            stayers = [
                pool.submit(lambda b: served.http().post("/v1/completions", json=b), b) for b in bodies[3:]
            ]
            wait_for(lambda: answering(served) == 6, "the stayers were submitted")
        assert entered.wait(DEADLINE_S)
        for sock in leavers:
            sock.close()
        wait_for(lambda: answering(served) == 3, "the server saw the leavers leave")
        gate.set()
        answers = [s.result(DEADLINE_S) for s in stayers]
    assert [a.json()["choices"][0]["text"] for a in answers] == [
        a.json()["choices"][0]["text"] for a in alone
    ]
    assert counted(served, before, 6) == {"finished": 3, "aborted": 3, "failed": 0}
    assert_nothing_held(served)


def write_paused(running: RunningServer) -> bool:
    """Some connection's answer waits for its client to read (asyncio stopped taking writes)."""
    return any(c.flow is not None and c.flow.write_paused for c in running.server.server_state.connections)


# an echoed prompt with 20 alternatives per token: megabytes, more than the loopback socket's
# buffers hold for a client that reads nothing, so the server's writes to it wait (back pressure)
HUGE_STREAM = long_body(
    True, prompt=[5 + i % 200 for i in range(6000)], echo=True, logprobs=20, max_tokens=100
)


@contextmanager
def slow_reader(running: RunningServer, body: dict) -> Iterator[socket.socket]:
    """A connection that has sent ``body`` with a small receive buffer and reads nothing yet."""
    host, port = running.url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    with sock:
        sock.connect((host, int(port)))
        data = json.dumps(body).encode()
        head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
        yield sock


def read_to_end(sock: socket.socket) -> bytes:
    """The rest of a chunked response."""
    received = bytearray()
    sock.settimeout(DEADLINE_S)
    while not received.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
        piece = sock.recv(1 << 16)
        assert piece, "the server closed the slow client's stream"
        received += piece
    return bytes(received)


def test_a_client_reading_its_stream_slowly_holds_up_no_other_client(served):
    with slow_reader(served, HUGE_STREAM) as sock:
        wait_for(lambda: write_paused(served), "the server waits for the slow client")
        with served.http() as http:  # meanwhile another client is answered in full
            other = http.post("/v1/completions", json=long_body(False, max_tokens=20))
        assert other.status_code == 200 and other.json()["usage"]["completion_tokens"] == 20
        received = read_to_end(sock)
    assert received.count(b'"finish_reason": "length"') == 1 and b"data: [DONE]" in received
    assert_nothing_held(served)


def test_a_stream_the_engine_has_answered_is_not_counted_as_answering_while_its_client_reads(served):
    """Long bodies make way while the engine answers requests (`Answering`): a stream the engine
    had finished counted as being answered until its slow client read all of it, so one stalled
    reader held every long upload to a piece per 0.1 s for as long as it stayed connected."""
    before = outcomes(served)
    with slow_reader(served, HUGE_STREAM) as sock:
        wait_for(lambda: write_paused(served), "the server waits for the slow client")
        assert counted(served, before, 1) == {"finished": 1, "aborted": 0, "failed": 0}
        wait_for(lambda: answering(served) == 0, "the answered stream stopped counting")
        assert b"data: [DONE]" in read_to_end(sock)
    assert_nothing_held(served)


def scrape(running: RunningServer) -> dict[str, float]:
    text = running.http().get("/metrics").text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line[:1] != "#"
    }


def test_metrics_scraped_during_a_burst_only_grow_and_count_each_request_once(served):
    stop, scrapes = threading.Event(), []

    def scraper() -> None:
        while not stop.is_set():
            scrapes.append(scrape(served))

    def one(i: int) -> None:
        leaves = i % 4 == 3  # after its second line, with most of its 400 tokens to come
        max_tokens = 400 if leaves else 4 + 30 * (i % 3)
        body = long_body(i % 2 == 1, max_tokens=max_tokens, prompt=f"Client {i} says")
        with served.http() as http, http.stream("POST", "/v1/completions", json=body) as r:
            for n, _ in enumerate(r.iter_lines()):
                if leaves and n == 2:
                    return
            assert r.status_code == 200

    before = outcomes(served)
    thread = threading.Thread(target=scraper)
    thread.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(12)))
    finally:
        stop.set()
        thread.join(DEADLINE_S)
    assert counted(served, before, 12) == {"finished": 9, "aborted": 3, "failed": 0}
    assert_nothing_held(served)
    scrapes.append(scrape(served))
    growing = [k for k in scrapes[0] if k.endswith(("_total", "_count", "_sum")) or "_bucket{" in k]
    for earlier, later in itertools.pairwise(scrapes):
        assert [k for k in growing if later[k] < earlier[k]] == []
    last = scrapes[-1]
    assert [last[f"radixflow_requests_{g}"] for g in ("running", "waiting", "pending")] == [0, 0, 0]
    assert last["radixflow_cache_promised_bytes"] == 0 and last['radixflow_cache_bytes{kind="working"}'] == 0


def test_a_sigterm_drains_what_runs_refuses_what_comes_and_a_second_answers_the_rest_503(zoo):
    with running_server(ServerConfig(max_pending=8, drain_s=600)) as running:
        http = running.http()
        short = http.stream("POST", "/v1/completions", json=long_body(True, max_tokens=30))
        endless = http.stream("POST", "/v1/completions", json=long_body(True, max_tokens=8000))
        with short as a, endless as b:
            a_events, b_events = stream_events(a.iter_lines()), stream_events(b.iter_lines())
            next(b_events)  # both run
            with engine_held(running):
                running.server.handle_exit(signal.SIGTERM, None)
                wait_for(lambda: http.get("/health").json() == {"status": "draining"}, "it drains")
                late = http.post("/v1/completions", json=long_body(False, max_tokens=2))
                assert late.status_code == 503 and "shutting down" in late.json()["error"]["message"]
            finishes = [c["choices"][0]["finish_reason"] for c in a_events]
            assert finishes[-1] == "length"  # the drain let it finish, to [DONE]
            running.server.handle_exit(signal.SIGTERM, None)  # the endless one is still running
            errors = [e["error"]["message"] for e in b_events if "error" in e]
            assert errors == ["the server shut down before this request finished"]
        outcome = outcomes(running)
        assert outcome == {"finished": 1, "aborted": 0, "failed": 1}
        running.server.state.loop.join(DEADLINE_S)


def test_clients_sending_the_same_request_id_are_answered_and_aborted_apart(served):
    # the id names the answer only: neither answer nor abort finds the other client's request
    headers = {"X-Request-Id": "same"}
    before = outcomes(served)
    with (
        served.http() as http,
        http.stream("POST", "/v1/completions", json=long_body(True), headers=headers) as r,
    ):
        assert next(stream_events(r.iter_lines()))["id"] == "cmpl-same"
        other = http.post("/v1/completions", json=long_body(False, max_tokens=5), headers=headers)
    assert other.json()["id"] == "cmpl-same" and other.json()["usage"]["completion_tokens"] == 5
    assert counted(served, before, 2) == {"finished": 1, "aborted": 1, "failed": 0}
    assert_nothing_held(served)


def test_a_prompt_whose_client_left_while_it_waited_for_a_tokenizer_thread_is_never_tokenized(
    served, monkeypatch
):
    """Clients that give up while their prompts wait for a tokenizer thread (a burst of long
    prompts, clients timing out and retrying) had every abandoned prompt tokenized anyway, each
    ahead of the retries: the wait ends when the client leaves, and the prompt is dropped."""
    threads = served.server.state.config.tokenizer_threads
    busy, gate, tokenized = threading.Semaphore(0), threading.Event(), []
    prepare = completions.prepare

    def held(body, *args):
        tokenized.append(body.prompt)
        if body.prompt == "hold":
            busy.release()
            assert gate.wait(2 * DEADLINE_S)  # past the test's own waits: it fails first
        return prepare(body, *args)

    monkeypatch.setattr(completions, "prepare", held)
    state = served.server.state
    try:
        holders = [
            raw_post(served, "/v1/completions", long_body(False, prompt="hold")) for _ in range(threads)
        ]
        for _ in holders:
            assert busy.acquire(timeout=DEADLINE_S)  # every tokenizer thread is busy
        gone = raw_post(served, "/v1/completions", long_body(False, prompt="gone"))
        wait_for(lambda: state._reading == threads + 1, "its prompt waits for a tokenizer thread")
        gone.close()
        wait_for(lambda: state._reading == threads, "the server saw the client leave")
        for sock in holders:  # theirs are being tokenized: they leave too, and nothing is submitted
            sock.close()
        wait_for(lambda: state._reading == 0, "the server saw them leave")
    finally:
        gate.set()
    assert_nothing_held(served)
    assert tokenized == ["hold"] * threads


def test_a_tokenize_body_whose_client_left_while_it_waited_for_a_tokenizer_thread_is_never_tokenized(
    served, monkeypatch
):
    """The engine routes drop a prompt whose client left while it waited for a tokenizer thread;
    /tokenize tokenized it anyway (a long text in the long lane, ahead of the next)."""
    threads = served.server.state.config.tokenizer_threads
    busy, gate, tokenized, cancelled = threading.Semaphore(0), threading.Event(), [], []
    prepare, encode = completions.prepare, tokenize._tokenize
    state = served.server.state
    offload = state.offload

    def held(body, *args):
        busy.release()
        assert gate.wait(2 * DEADLINE_S)  # past the test's own waits: it fails first
        return prepare(body, *args)

    def seen(body, *args):
        tokenized.append(body.prompt)
        return encode(body, *args)

    async def watched(fn, *args):
        try:
            return await offload(fn, *args)
        except asyncio.CancelledError:
            cancelled.append(fn)
            raise

    monkeypatch.setattr(completions, "prepare", held)
    monkeypatch.setattr(tokenize, "_tokenize", seen)
    monkeypatch.setattr(state, "offload", watched)
    holders = []
    try:
        holders = [raw_post(served, "/v1/completions", long_body(False, prompt="x")) for _ in range(threads)]
        for _ in holders:
            assert busy.acquire(timeout=DEADLINE_S)  # every tokenizer thread is busy
        gone = raw_post(served, "/tokenize", {"model": MODEL, "prompt": "gone"})
        gone.close()
        wait_for(lambda: seen in cancelled, "the server saw the client leave")
    finally:
        gate.set()
        for sock in holders:
            sock.close()
    after = served.http().post("/tokenize", json={"model": MODEL, "prompt": "after"})
    assert after.status_code == 200 and tokenized == ["after"], tokenized
