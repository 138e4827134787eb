"""The server's log warnings name their source as the command line's do (`radixflow: warning:`):
`serve` configures no logging, so each reaches stderr bare, beside the command's own lines."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace

import pytest

pytest.importorskip("uvicorn")

from radixflow.engine.trace_file import NOT_WRITTEN, TraceFile
from radixflow.server.loop import EngineLoop
from radixflow.server.serve import Server

PREFIX = "radixflow: warning: "


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("radixflow")]


def _fail(*_: object) -> None:
    raise OSError(28, "No space left on device")


def test_a_trace_the_server_cannot_write_is_a_prefixed_warning(caplog) -> None:
    loop = SimpleNamespace(engine=SimpleNamespace(flush_events=_fail))
    with caplog.at_level(logging.WARNING):
        EngineLoop._flush_trace(loop)  # type: ignore[arg-type]
    assert said(caplog) == [f"{PREFIX}{NOT_WRITTEN}: No space left on device"]


def test_a_trace_stopped_mid_run_is_a_prefixed_warning(caplog) -> None:
    trace = SimpleNamespace(
        _last_flush=float("-inf"), _pending=[{}], flush=_fail, error="cannot write t: full"
    )
    with caplog.at_level(logging.WARNING):
        TraceFile.tick(trace)  # type: ignore[arg-type]
    assert said(caplog) == [f"{PREFIX}trace stopped: cannot write t: full"]


def _server() -> SimpleNamespace:
    loop = SimpleNamespace(shutdown=lambda _s: None, abandon=lambda _m: None)
    return SimpleNamespace(
        state=SimpleNamespace(loop=loop), _engine_due=0.0, ENGINE_GRACE_S=5.0, HURRY_S=2.0, engine_left=False
    )


def test_the_drain_cut_short_or_left_is_said_in_prefixed_warnings(caplog) -> None:
    server = _server()
    server._past_hurry = lambda: True
    with caplog.at_level(logging.WARNING):
        Server.hurry(server)  # type: ignore[arg-type]
        Server._leave_engine(server)  # type: ignore[arg-type]
        asyncio.run(Server._give_up_when_due(server))  # type: ignore[arg-type]
    lines = said(caplog)
    assert len(lines) == 3 and all(line.startswith(PREFIX) for line in lines), lines
    assert server.engine_left and server.force_exit
