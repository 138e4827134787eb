"""How long `serve` waits, after its drain, for clients to take their answers (server/serve.py):
a client that stopped reading a stream held the server the whole drain timeout again, plus 5 s,
past the drain itself (uvicorn's graceful wait counted from the drain's end)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

pytest.importorskip("uvicorn")

import uvicorn

from radixflow.server import serve as serve_module
from radixflow.server.serve import Server, serve_state


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("drain_s, engine_done_after", [(30.0, 30.0), (30.0, 4.0), (2.0, 2.0)])
def test_clients_get_the_drains_time_then_hurry_s_not_the_drain_timeout_again(
    monkeypatch, drain_s, engine_done_after
):
    clock = Clock()
    monkeypatch.setattr(serve_module.time, "monotonic", clock)
    monkeypatch.setattr(serve_module, "create_app", lambda state: SimpleNamespace())

    def join(timeout: float | None = None) -> bool:  # the engine answered every request by then
        clock.now = max(clock.now, started + engine_done_after)
        return True

    loop = SimpleNamespace(shutdown=lambda _s: None, join=join, abandon=lambda _m: None)
    state = SimpleNamespace(config=SimpleNamespace(drain_s=drain_s), loop=loop, close=lambda: None)
    server = serve_state(state, "127.0.0.1", 0, "warning")  # type: ignore[arg-type]
    waited: list[float] = []

    async def uvicorn_shutdown(self: Server, sockets=None) -> None:
        waited.append(self.config.timeout_graceful_shutdown)  # what it waits for connections

    monkeypatch.setattr(uvicorn.Server, "shutdown", uvicorn_shutdown)
    started = clock.now
    asyncio.run(server.shutdown())
    # until the drain's end (the clients' time to read what the engine answered), then HURRY_S
    # for the drain's 503s to go out: at most drain_s + HURRY_S from the signal, not 2 x drain_s + 5
    assert waited == [pytest.approx(drain_s - engine_done_after + Server.HURRY_S)]
