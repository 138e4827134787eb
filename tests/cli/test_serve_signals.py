"""`radixflow serve` stopped by a SIGTERM or SIGHUP: before it serves (the model loading) and once
it has drained, one line and the signal's exit code, as every other command."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import uvicorn
from server_utils import MODEL

from radixflow.cli import main

pytest.importorskip("torch")
SERVE = ["serve", MODEL, "--port", "0", "--host", "127.0.0.1"]


@contextmanager
def handler_for(sig: int, handler: object) -> Iterator[None]:
    before = signal.signal(sig, handler)  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.signal(sig, before)


class _Loaded(Exception):
    """The load went on past the signal: the test stops there."""


@pytest.mark.parametrize(("sig", "said"), [(signal.SIGTERM, "terminated"), (signal.SIGHUP, "hung up")])
def test_a_signal_while_serve_loads_its_model_ends_it_with_one_line(zoo, monkeypatch, capsys, sig, said):
    """A SIGTERM or SIGHUP while the model loaded (seconds to minutes) met the system's handler:
    the process ended at once, without a word (serve handles them itself, but only once uvicorn
    serves). Now it stops there as a Ctrl-C does: one line, 143 or 129."""
    import radixflow.generation.setup as setup

    def load_model(options):
        signal.raise_signal(sig)
        raise _Loaded

    monkeypatch.setattr(setup, "load_model", load_model)
    with handler_for(sig, lambda *a: None):  # the system's would end pytest
        code = main(SERVE)
        assert signal.getsignal(sig) is not signal.SIG_DFL  # the test's, restored
    assert code == 128 + sig
    assert capsys.readouterr().err.splitlines()[-1] == f"radixflow: {said}"


def loaded_model() -> SimpleNamespace:
    """What serve reads of a loaded model before it builds the server."""
    choice = SimpleNamespace(has_recurrent=True, describe=lambda runner: {})
    return SimpleNamespace(setup=SimpleNamespace(choice=choice, runner=None))


class DrainedBy:
    """A server that drains on ``sig`` (`Server.capture_signals`, as it serves) and returns."""

    engine_left = False

    def __init__(self, sig: int) -> None:
        self.sig = sig

    def run(self, sockets: object = None) -> None:
        from radixflow.server.serve import Server

        server = Server(uvicorn.Config(lambda *a: None), state=None)  # type: ignore[arg-type]
        with server.capture_signals():
            signal.raise_signal(self.sig)  # the drain; raised again on the way out


@pytest.mark.parametrize(("sig", "said"), [(signal.SIGTERM, "terminated"), (signal.SIGHUP, "hung up")])
def test_a_server_drained_by_a_signal_ends_with_one_line_and_its_code(zoo, monkeypatch, capsys, sig, said):
    """Once drained, the signal was raised again under the system's handler: exit by the signal,
    without a word. Now as every command a SIGTERM or SIGHUP stops: one line, 143 or 129."""
    import radixflow.generation.setup as setup
    import radixflow.server.serve as serve

    monkeypatch.setattr(setup, "load_model", lambda options: loaded_model())
    monkeypatch.setattr(serve, "build_server", lambda *a: DrainedBy(sig))
    with handler_for(sig, lambda *a: None):  # the system's would end pytest
        code = main(SERVE)
    assert code == 128 + sig
    assert capsys.readouterr().err.splitlines()[-1] == f"radixflow: {said}"


@contextmanager
def set_outside_python(monkeypatch: pytest.MonkeyPatch, sig: int) -> Iterator[None]:
    """As where ``sig``'s handler was installed before Python's own (a program embedding Python):
    `signal.getsignal` says None, and so does `signal.signal` of what it replaces. A stand-in
    handler takes its place here, to be found back on the way out."""
    real_signal, real_getsignal = signal.signal, signal.getsignal

    def stand_in(signum: int, frame: object) -> None:
        pass

    before = real_signal(sig, stand_in)

    def shown(handler: object) -> object:
        return None if handler is stand_in else handler

    monkeypatch.setattr(signal, "getsignal", lambda s: shown(real_getsignal(s)))
    monkeypatch.setattr(signal, "signal", lambda s, h: shown(real_signal(s, h)))
    try:
        yield
    finally:
        monkeypatch.undo()
        assert real_getsignal(sig) is stand_in, "the handler set outside Python was replaced"
        real_signal(sig, before)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_handler_set_outside_python_is_left_in_place(monkeypatch, sig):
    """Where a signal's handler was set outside Python (`signal.getsignal` None), restoring it
    on the way out, `signal.signal(sig, None)`, raised TypeError: the command's exit a traceback.
    Now such a handler is left alone, as an ignored signal is."""
    from radixflow.cli.sigterm import SigtermAsCtrlC
    from radixflow.server.serve import Server

    server = Server(uvicorn.Config(lambda *a: None), state=None)  # type: ignore[arg-type]
    with set_outside_python(monkeypatch, sig):
        with SigtermAsCtrlC() as term, server.capture_signals():
            assert signal.getsignal(sig) is None
        assert not term.came and not server.should_exit
