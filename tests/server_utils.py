"""A real `radixflow serve` in a thread of the test process, on a free loopback port.

A plain module (like model_utils): the server tests import it as ``from server_utils import ...``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import openai

from radixflow.engine.engine import Engine
from radixflow.generation.setup import load_model
from radixflow.options import EngineOptions
from radixflow.server.serve import Server, build_server
from radixflow.server.state import ServerConfig

T = TypeVar("T")
MODEL = "qwen3_5-tiny"  # hybrid (Gated DeltaNet + attention): checkpoints, consumers and all
OPTIONS = EngineOptions(model=MODEL, kv_blocks=512, state_slots=64, token_budget=256)


HTTP_TIMEOUT_S = 120.0  # a test's request, answered or not, on a loaded machine


@dataclass
class RunningServer:
    server: Server
    url: str  # http://127.0.0.1:PORT
    thread: threading.Thread  # runs the server: ends once it has shut down

    def client(self, **kwargs: Any) -> openai.OpenAI:
        # no retries: a 429 must reach the test, not be retried away
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0, **kwargs)

    def http(self, **kwargs: Any) -> httpx.Client:
        # httpx's default of 5 s failed a plain chat turn on a machine at a load of 20 (a busy CI
        # beside other sessions); a test about a timeout gives its own
        kwargs.setdefault("timeout", HTTP_TIMEOUT_S)
        return httpx.Client(base_url=self.url, **kwargs)

    def on_engine(self, fn: Callable[[Engine], T]) -> T:
        """Run ``fn`` on the engine thread between rounds (the engine is single-threaded)."""
        return self.server.state.loop.call(fn)

    def wait_idle(self, timeout: float = 20.0) -> None:
        """Until the engine holds no request (aborts and answers are applied between rounds)."""
        deadline = time.monotonic() + timeout
        while self.on_engine(lambda e: e.has_work() or bool(e.requests)):
            assert time.monotonic() < deadline, "the engine never went idle"
            time.sleep(0.02)


@contextmanager
def running_server(
    config: ServerConfig | None = None, options: EngineOptions = OPTIONS
) -> Iterator[RunningServer]:
    model = load_model(options)
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only then, and
    # without it every response waits ~40 ms for a delayed ACK (Nagle)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = build_server(model, config or ServerConfig(), "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield RunningServer(server, f"http://127.0.0.1:{port}", thread)
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
    # past the finally: only when the test itself passed (its own error stays the one reported).
    # A server that never shut down was left running, unsaid, into the next test
    assert not thread.is_alive(), "the server did not shut down within 60 s"
