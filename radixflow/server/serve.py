"""Running the app under uvicorn, with a shutdown that drains the engine before connections close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
import time
from collections.abc import Iterator
from types import FrameType

import uvicorn
from uvicorn.server import HANDLED_SIGNALS

from radixflow.generation.setup import LoadedModel
from radixflow.problems import Problem, ProblemError
from radixflow.server.app import create_app
from radixflow.server.loop import ENGINE_GRACE_S, STUCK
from radixflow.server.state import ServerConfig, ServerState, local_backend

log = logging.getLogger("radixflow.server")
ROUND_HISTORY = 256  # rounds the engine keeps; the metrics aggregate every round as it happens


class Server(uvicorn.Server):
    """uvicorn's server, with a shutdown that answers every client.

    Ctrl-C (or SIGTERM, or SIGHUP: the terminal or ssh session closed): stop accepting and drain.
    The engine loop gives accepted requests ``drain_s`` to finish, then fails the rest with a 503,
    while their connections are still open to carry that answer: clients have until the drain's end,
    then ``HURRY_S``, to take their answers (one that stopped reading is then cut off, not waited
    for the drain time again). The listening socket stays open while it drains: a request for the
    engine arriving meanwhile, on a new connection or a kept-alive one, is answered with a 503 in
    OpenAI's shape (and ``/health`` says ``draining``; the tokenizer routes, which never reach the
    engine, still answer), not refused at the TCP level; it closes once the engine loop is done. A
    second such signal ends the drain now: every unfinished request gets its 503 at once (a JSON
    error body; a stream, an error event and ``[DONE]``), and the server exits when those answers
    are out, or after ``HURRY_S`` if a client does not take its answer. Only a third drops
    connections unanswered (uvicorn's own forced exit). Either way the engine thread ends before the
    process does: one left running in torch aborts the process.

    Unless it is stuck: an engine thread still in its round ``ENGINE_GRACE_S`` after the drain's
    end (or after the second signal) is left behind. Its requests are answered with a 503 here,
    the server exits once those answers are out, and ``engine_left`` says so (the CLI then ends
    the process without waiting for the thread)."""

    HURRY_S = 5.0
    ENGINE_GRACE_S = ENGINE_GRACE_S

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state
        self._aio: asyncio.AbstractEventLoop | None = None
        self._give_up_at: float | None = None  # set by the second signal
        self._interrupted = False  # a Ctrl-C (SIGINT) stopped it
        self._engine_due = float("inf")  # monotonic: past this, a stuck engine thread is left behind
        self._answered_at: float | None = None  # monotonic: every accepted request had its answer
        self.engine_left = False  # the engine thread was stuck past the drain: left behind

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._aio = asyncio.get_running_loop()
        await super().serve(sockets)
        if self._interrupted:
            # uvicorn re-raises the signal under the handler the process started with; where that
            # ignores SIGINT (a background job of a non-interactive shell, nohup) the re-raise is
            # lost and the process would exit 0. The CLI's 130 must not depend on how it started.
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, with SIGHUP beside SIGINT and SIGTERM: uvicorn leaves it to the system, which
        ended the process at once, every accepted request lost. A SIGTERM or SIGHUP ignored when
        serving starts (``trap '' TERM``, ``nohup``'s SIGHUP) stays ignored, as it did while the
        model loaded (`SigtermAsCtrlC`); SIGINT is taken even then (a shell ignores it in its
        background jobs, unasked). A handler set outside Python (`signal.getsignal` None) is left
        in place, as Python could not put it back. Once drained, the first signal that came is
        raised again under the handler the process had (the system's SIGHUP: exit 129): the exit
        is the first's."""
        if threading.current_thread() is not threading.main_thread():  # none can be set there
            yield
            return
        taken = [sig for sig in (*HANDLED_SIGNALS, signal.SIGHUP) if _takes(sig, signal.getsignal(sig))]
        before = {sig: signal.signal(sig, self.handle_exit) for sig in taken}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
        if self._captured_signals:  # the first alone: the exit is its (uvicorn's raised the last's)
            signal.raise_signal(self._captured_signals[0])

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler: it only hands the work to the event loop (safe from a handler).
        # SIGINT, SIGTERM and SIGHUP count alike: uvicorn's own forces its exit on a second SIGINT only,
        # so a supervisor's second SIGTERM did nothing while the server drained
        self._interrupted = self._interrupted or sig == signal.SIGINT
        if not self.should_exit or self._aio is None:
            super().handle_exit(sig, frame)  # the first: drain
        elif self._give_up_at is None:  # the second: end the drain now
            self._give_up_at = time.monotonic() + self.HURRY_S
            self._aio.call_soon_threadsafe(self.hurry)
        else:  # the third: uvicorn's forced exit, connections dropped
            self.force_exit = True

    def hurry(self) -> None:
        """End the drain now: the engine loop answers every unfinished request with a 503."""
        log.warning("radixflow: warning: second signal: answering unfinished requests with 503 and exiting")
        self.state.loop.shutdown(0.0)
        self._engine_due = min(self._engine_due, time.monotonic() + self.ENGINE_GRACE_S)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        drain_s = self.state.config.drain_s
        drain_end = time.monotonic() + drain_s
        self.state.loop.shutdown(drain_s)
        self._engine_due = min(self._engine_due, drain_end + self.ENGINE_GRACE_S)
        watch = asyncio.ensure_future(self._give_up_when_due())
        try:
            await self._drain()
            # clients read until the drain's end, then have HURRY_S to take the drain's 503s:
            # uvicorn's own wait, drain_s + 5 from now, kept a stalled reader 2 x drain_s + 5 s
            left = max(drain_end - time.monotonic(), 0.0) + self.HURRY_S
            self.config.timeout_graceful_shutdown = left  # type: ignore[assignment]  # a float does
            await super().shutdown(sockets)  # closes the listening socket, then the connections
        finally:
            watch.cancel()
        if self.force_exit:
            # uvicorn skips the app's shutdown then; run it anyway, with no drain left: it ends the
            # engine thread (after its current round, or leaves it stuck) and the tokenizer threads.
            self.state.loop.shutdown(0.0)
            self._engine_due = min(self._engine_due, time.monotonic() + self.ENGINE_GRACE_S)
            await self._drain(hard=True)
            await self.lifespan.shutdown()
        await asyncio.to_thread(self.state.loop.join)  # whatever ran the app (or did not)
        self.state.close()

    async def _drain(self, hard: bool = False) -> None:
        """Until the engine loop has answered every accepted request (or failed them at the drain's
        end, or a second signal), or a third (unless ``hard``); the server keeps answering
        meanwhile. An engine thread stuck in its round past ``_engine_due`` is left behind."""
        loop = self.state.loop
        while not await asyncio.to_thread(loop.join, 0.1):
            if time.monotonic() >= self._engine_due:
                self._leave_engine()
                break
            if self.force_exit and not hard:
                return
        self._answered_at = time.monotonic()

    def _past_hurry(self) -> bool:
        if self._give_up_at is None or self._answered_at is None:
            return False
        return time.monotonic() >= max(self._give_up_at, self._answered_at + self.HURRY_S)

    def _leave_engine(self) -> None:
        log.warning(
            "radixflow: warning: the engine did not finish its round within %.0f s of the drain's end "
            "(stuck); its requests were answered with 503 and the server exits without it",
            self.ENGINE_GRACE_S,
        )
        self.engine_left = True
        self.state.loop.abandon(STUCK)

    async def _give_up_when_due(self) -> None:
        # HURRY_S after the second signal, and after the answers went out (a stuck engine's
        # requests are answered only once its grace is over): the clients' time to take them
        while not self._past_hurry():
            await asyncio.sleep(0.1)
        log.warning(
            "radixflow: warning: clients did not take their answers within %.0f s; closing", self.HURRY_S
        )
        self.force_exit = True


def _takes(sig: int, handler: object) -> bool:
    """Whether serving takes ``sig`` over from ``handler``, the one it finds (see
    `Server.capture_signals`)."""
    if handler is None:  # set outside Python: it could not be put back
        return False
    return handler is not signal.SIG_IGN or sig == signal.SIGINT


def build_server(
    model: LoadedModel,
    config: ServerConfig,
    host: str,
    port: int,
    log_level: str,
) -> Server:
    return serve_state(server_state(model, config), host, port, log_level)


def server_state(model: LoadedModel, config: ServerConfig) -> ServerState:
    """What the routes share, over an engine of ``model`` (`ProblemError` for a model without a
    tokenizer: the HTTP API takes text)."""
    if model.tokenizer is None:
        raise ProblemError(
            Problem("model", f"{model.path} has no tokenizer.json: the HTTP API needs the model's tokenizer")
        )
    engine = model.engine(round_history=ROUND_HISTORY)
    return ServerState(local_backend(model, engine, config.max_pending), config)


def serve_state(state: ServerState, host: str, port: int, log_level: str) -> Server:
    """The HTTP server over ``state`` (its loop starts with the app)."""
    config = state.config
    uv_config = uvicorn.Config(
        create_app(state),
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=int(config.drain_s) + 5,  # past the drain: answers are on their way
        access_log=log_level == "debug",
    )
    return Server(uv_config, state)
