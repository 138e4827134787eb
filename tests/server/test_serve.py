"""`radixflow serve` as its own process, stopped with Ctrl-C twice (server/serve.py): the second
Ctrl-C ends the drain, yet every client still gets its answer in OpenAI's shape, and the process
exits without aborting (a torch thread left running at exit used to abort it: exit 134) with 130,
however it was started (one started with SIGINT ignored, as a background job, used to exit 0)."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from cli_utils import checkout_env
from server_utils import MODEL, running_server

from radixflow.server.listen import announced_url
from radixflow.server.serve import Server
from radixflow.server.spawn import healthy
from radixflow.server.state import ServerConfig

LONG = {"model": MODEL, "prompt": "The river winds", "max_tokens": 3000, "ignore_eos": True, "temperature": 0}


def announced(proc: subprocess.Popen[str], timeout: float) -> list[str]:
    """The server's standard error up to its banner (``radixflow: serving M on URL ...``), read
    as it comes: with ``--port 0`` the banner is where the port it chose is said. A port picked
    here and passed on could be taken by another process (another test worker) before the server
    bound it. Not `server.spawn.serve_process`: these tests start it through a wrapper, with
    SIGINT ignored or not, and read the rest of its standard error themselves."""
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr or ():
            lines.append(line)
            if announced_url(line):
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    assert lines and announced_url(lines[-1]), "".join(lines) or "no banner"
    return lines


@contextmanager
def sigint_inherited(disposition: str) -> Iterator[None]:
    """While a child starts, this process's SIGINT disposition: ``"ignored"`` as a background job
    of a non-interactive shell (or nohup) starts it, which the child inherits through exec."""
    if disposition == "default":
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


# `radixflow serve` whose rounds each take at least 50 ms: a 3000-token request then runs for
# 150 s or more whatever the machine's speed, past every wait of these tests. At full speed it
# ran ~7 s, and a test process stalled that long (a busy machine) found its answers complete,
# 200s where the drain's 503s were due
SLOW_ROUNDS = """
import sys, time
from radixflow.cli.app import main
from radixflow.runners.torch_runner import TorchRunner
run = TorchRunner.run
def slow(self, batch):
    time.sleep(0.05)
    return run(self, batch)
TorchRunner.run = slow
sys.exit(main())
"""


@pytest.fixture(params=["default", "ignored"], ids=lambda d: f"sigint-{d}")
def server_process(zoo, request) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """The server as its own process on a port it chose: the process, its URL and its banner."""
    args = ["serve", MODEL, "--port", "0", "--kv-blocks", "512", "--state-slots", "64"]
    args += ["--drain-timeout", "120", "--log-level", "warning"]  # only the second Ctrl-C can end it
    env = checkout_env()
    with sigint_inherited(request.param):
        # a SIGTERM ignored where pytest runs would be kept ignored by the server (as it should)
        default_term = functools.partial(signal.signal, signal.SIGTERM, signal.SIG_DFL)
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_ROUNDS, *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=default_term,
        )
    try:
        banner = announced(proc, 90)[-1]
        url = announced_url(banner)
        assert url is not None, banner
        wait_until(lambda: healthy(url, timeout_s=1), 90, lambda: proc.poll() is None)
        yield proc, url, banner
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)


def draining(url: str) -> bool:
    """The first Ctrl-C has been handled: /health answers 503, or the listener is closed. A
    timeout proves nothing (a busy machine answers late), so it is asked again: a second Ctrl-C
    sent before the first is handled would merge with it (a pending signal is not queued twice)."""
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 503
    except httpx.ConnectError:
        return True
    except httpx.TimeoutException:
        return False


def wait_until(done, timeout: float, alive=lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert alive() and time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


def pending(url: str) -> float | None:
    """Requests the engine holds; None when /metrics did not answer in time (a busy machine)."""
    try:
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.TimeoutException:
        return None
    line = next(x for x in metrics.splitlines() if x.startswith("radixflow_requests_pending "))
    return float(line.split()[1])


def test_a_second_ctrl_c_answers_every_client_then_exits_cleanly(server_process):
    proc, url, banner = server_process
    got: dict[str, object] = {}

    # the clients wait out every wait below (a plain answer's first byte is its 503): with 60 s
    # they could give up first on a busy machine, and the test then failed on a missing answer
    def plain() -> None:
        got["plain"] = httpx.post(f"{url}/v1/completions", json=LONG, timeout=300)

    def stream() -> None:
        with httpx.stream("POST", f"{url}/v1/completions", json={**LONG, "stream": True}, timeout=300) as r:
            got["stream"] = [line for line in r.iter_lines() if line]

    clients = [threading.Thread(target=plain), threading.Thread(target=stream)]
    for c in clients:
        c.start()
    wait_until(lambda: pending(url) == 2, 30)
    proc.send_signal(signal.SIGINT)  # drain: 120 s for the two 3000-token requests
    wait_until(lambda: draining(url), 60)
    proc.send_signal(signal.SIGINT)  # enough: answer them now
    for c in clients:
        c.join(120)
    rc = proc.wait(120)
    stderr = proc.stderr.read() if proc.stderr else ""

    plain_answer = got["plain"]
    assert isinstance(plain_answer, httpx.Response) and plain_answer.status_code == 503
    error = plain_answer.json()["error"]
    assert error["type"] == "service_unavailable_error" and error["message"], error
    lines = got["stream"]
    assert isinstance(lines, list) and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2].removeprefix("data: "))["error"]["type"] == "service_unavailable_error"
    # interrupted: not an abort (-6 / 134), and not 0 where the process started with SIGINT ignored
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
    assert "tokenizer threads; round predictor from " in banner  # its prior: stored profile or nominal


def health_status(url: str) -> int | None:
    """/health's status code; None when the connection is refused. A late answer is waited for
    (a busy machine answers late): it was None too, so a /health that took over 5 s read as
    "no longer 200", and the test went on to a draining server that was not draining yet."""
    try:
        return httpx.get(f"{url}/health", timeout=60).status_code
    except httpx.ConnectError:
        return None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_while_draining_a_new_connection_gets_a_503_not_a_refusal(server_process, sig):
    proc, url, _ = server_process
    got: dict[str, httpx.Response] = {}
    client = threading.Thread(
        target=lambda: got.update(r=httpx.post(f"{url}/v1/completions", json=LONG, timeout=300))
    )  # it waits out every wait below
    client.start()
    wait_until(lambda: pending(url) == 1, 30)
    proc.send_signal(sig)  # drain: 120 s for the 3000-token request
    wait_until(lambda: health_status(url) != 200, 60)  # bounds a hang: a busy machine is slow
    draining = httpx.get(f"{url}/health", timeout=60)  # a new connection: answered, not refused
    assert draining.status_code == 503 and draining.json() == {"status": "draining"}
    late = httpx.post(f"{url}/v1/completions", json={**LONG, "max_tokens": 1}, timeout=60)
    assert late.status_code == 503, late.text
    error = late.json()["error"]
    assert error["type"] == "service_unavailable_error" and "shutting down" in error["message"], error
    proc.send_signal(signal.SIGINT)  # ends the drain: the accepted request gets its 503 now
    client.join(120)
    assert got["r"].status_code == 503
    proc.wait(120)
    stderr = proc.stderr.read() if proc.stderr else ""
    assert "Traceback" not in stderr, stderr
    assert health_status(url) is None  # closed once every answer is out


def stick_runner(srv, entered: threading.Event, release: threading.Event) -> None:
    """The engine's next worker call sets ``entered`` and then waits for ``release`` (a worker
    call that never returns, until the test lets it)."""
    runner = srv.server.state.loop.engine.runner
    run = runner.run

    def stuck(batch):
        entered.set()
        release.wait()
        return run(batch)

    runner.run = stuck


def test_a_shutdown_with_the_engine_stuck_in_a_round_answers_every_client_and_ends(zoo):
    # the engine thread never finished its round (a worker call that never returns), and the
    # shutdown waited for it without a bound: the drain's 503s never went out, the process hung
    release, entered = threading.Event(), threading.Event()
    with running_server(ServerConfig(drain_s=0.0)) as srv:
        srv.server.ENGINE_GRACE_S = 0.5  # any grace: the stuck round never ends by itself
        stick_runner(srv, entered, release)
        got: dict[str, object] = {}

        def plain() -> None:
            got["plain"] = httpx.post(f"{srv.url}/v1/completions", json=LONG, timeout=60)

        def stream() -> None:
            with httpx.stream(
                "POST", f"{srv.url}/v1/completions", json={**LONG, "stream": True}, timeout=60
            ) as r:
                got["stream"] = [line for line in r.iter_lines() if line]

        clients = [threading.Thread(target=plain), threading.Thread(target=stream)]
        try:
            for c in clients:
                c.start()
            assert entered.wait(60)
            wait_until(lambda: pending(srv.url) == 2, 30)  # both accepted: one is in the stuck round
            srv.server.should_exit = True  # as SIGTERM
            for c in clients:
                c.join(60)
            srv.thread.join(60)
            assert not srv.thread.is_alive(), "the shutdown waited for the stuck engine"
            assert srv.server.engine_left
        finally:
            release.set()
    plain_answer = got["plain"]
    assert isinstance(plain_answer, httpx.Response) and plain_answer.status_code == 503
    error = plain_answer.json()["error"]
    assert error["type"] == "service_unavailable_error" and "stuck" in error["message"], error
    lines = got["stream"]
    assert isinstance(lines, list) and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2].removeprefix("data: "))["error"]["type"] == "service_unavailable_error"


def test_a_second_sigterm_ends_the_drain_as_a_second_ctrl_c_does(zoo):
    # only a second SIGINT ended the drain: a second SIGTERM (a supervisor's, systemd's or
    # Kubernetes' insistence) did nothing, and the server went on draining for --drain-timeout
    release, entered = threading.Event(), threading.Event()
    with running_server(ServerConfig(drain_s=600.0)) as srv:
        srv.server.ENGINE_GRACE_S = 0.5  # the round never ends by itself: only the drain's end frees it
        stick_runner(srv, entered, release)
        got: dict[str, httpx.Response] = {}
        client = threading.Thread(
            target=lambda: got.update(r=httpx.post(f"{srv.url}/v1/completions", json=LONG, timeout=120))
        )
        try:
            client.start()
            assert entered.wait(60)
            srv.server.handle_exit(signal.SIGTERM, None)  # drain: 600 s
            wait_until(lambda: health_status(srv.url) != 200, 30)
            srv.server.handle_exit(signal.SIGTERM, None)  # enough: answer it now
            client.join(60)
            srv.thread.join(60)
            assert not srv.thread.is_alive(), "a second SIGTERM left the server draining"
        finally:
            release.set()
    assert got["r"].status_code == 503, got


@contextmanager
def handler_for(sig: int, handler: object) -> Iterator[None]:
    before = signal.signal(sig, handler)  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.signal(sig, before)


def bare_server() -> Server:
    """A `Server` whose signal handling alone is used: no app runs, no engine is built."""
    return Server(uvicorn.Config(lambda *a: None), state=None)  # type: ignore[arg-type]


def test_a_hangup_drains_the_server_as_a_sigterm_does():
    """`serve` died at once on SIGHUP (its terminal or ssh session closed): uvicorn handles SIGINT
    and SIGTERM only, so every accepted request was lost unanswered. Now a SIGHUP starts the drain
    as a SIGTERM does, and once it is done the SIGHUP is raised again under the handler the process
    had (the system's: the process ends with 129, as a shell reports a hangup)."""
    got: list[int] = []
    server = bare_server()
    with handler_for(signal.SIGHUP, lambda sig, frame: got.append(sig)):
        with server.capture_signals():
            signal.raise_signal(signal.SIGHUP)
            assert (server.should_exit, got) == (True, [])  # draining, not ended
        assert got == [signal.SIGHUP]  # after the drain, under the handler it found


def test_a_hangup_ignored_by_nohup_stays_ignored_while_serving():
    server = bare_server()
    with handler_for(signal.SIGHUP, signal.SIG_IGN):
        with server.capture_signals():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)
        assert not server.should_exit and signal.getsignal(signal.SIGHUP) is signal.SIG_IGN


class _Deployed(Exception):
    """Where the fleet's deployment would go on: the test stops there."""


def test_a_hangup_ends_a_fleet_through_its_teardown(zoo, monkeypatch, capsys):
    """`serve --replicas N`: once the ingress drained, the SIGHUP it raised again met the system's
    handler, which ended the process there, past the fleet's teardown (a SIGTERM meets Ray's
    handler, a ``sys.exit`` that runs it): on a cluster (``--ray-address``) the fleet's detached
    application was left running. Now a SIGHUP exits through the teardown too: one line, 129."""
    pytest.importorskip("ray.serve")
    import ray

    import radixflow.cluster.launch as launch
    from radixflow.cli import main

    torn_down: list[bool] = []

    @contextmanager
    def ray_serve(spec):
        try:
            yield
        finally:
            torn_down.append(True)

    def deploy(*args):
        signal.raise_signal(signal.SIGHUP)  # as the drained ingress raises it again
        raise _Deployed

    monkeypatch.setattr(launch, "ray_serve", ray_serve)
    monkeypatch.setattr(launch, "deploy", deploy)
    monkeypatch.setattr(ray, "available_resources", lambda: {"CPU": 4.0})
    with handler_for(signal.SIGHUP, lambda *a: None):  # the system's would end pytest
        code = main(["serve", MODEL, "--port", "0", "--replicas", "2"])
        assert signal.getsignal(signal.SIGHUP) is not signal.SIG_DFL  # restored to the test's
    assert (code, torn_down) == (129, [True])
    assert capsys.readouterr().err.splitlines()[-1] == "radixflow: hung up"


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_exit_after_a_second_signal_is_the_first_signals(first):
    """The docs say the exit status is the first signal's (130 after a Ctrl-C, 143 after a
    SIGTERM), but uvicorn raised the signals that came again last first: a supervisor's SIGTERM
    ending a Ctrl-C's drain made it 143, a Ctrl-C ending a SIGTERM's made it 130. Now the first
    alone is raised again."""
    second = signal.SIGTERM if first == signal.SIGINT else signal.SIGINT
    got: list[int] = []
    server = bare_server()

    def note(sig: int, frame: object) -> None:
        got.append(sig)

    with (
        handler_for(signal.SIGINT, note),
        handler_for(signal.SIGTERM, note),
        handler_for(signal.SIGHUP, note),
        server.capture_signals(),
    ):
        signal.raise_signal(first)
        signal.raise_signal(second)
        assert got == []
    assert got == [first]


def test_a_sigterm_ignored_when_serving_starts_stays_ignored():
    """A parent that set SIGTERM to SIG_IGN (`trap '' TERM`) meant it: the command keeps it
    ignored while the model loads (`SigtermAsCtrlC`), but serving took it over and drained on
    it. It stays ignored while serving too, as nohup's SIGHUP does."""
    server = bare_server()
    with handler_for(signal.SIGTERM, signal.SIG_IGN):
        with server.capture_signals():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            signal.raise_signal(signal.SIGTERM)
        assert not server.should_exit and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
