"""What thread tests share: a lock that tells a test when a given thread asks for it (the test
then knows that thread is waiting, or about to, with no sleep deciding anything), and a plugin
whose import waits on the test's events."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Protocol

import pytest

from radixflow.plugins import PLUGINS_ENV, forget_plugins
from radixflow.scheduler.policy import SCHEDULING_POLICIES


class _Lock(Protocol):
    def acquire(self) -> bool: ...
    def release(self) -> None: ...


class AskedLock:
    """``lock`` (a new `threading.Lock` by default), setting ``asked`` when the thread named
    ``by`` asks for it."""

    def __init__(self, by: str, asked: threading.Event, lock: _Lock | None = None) -> None:
        self.lock, self.by, self.asked = lock or threading.Lock(), by, asked

    def __enter__(self) -> None:
        if threading.current_thread().name == self.by:
            self.asked.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@contextmanager
def gated_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str, **more: object
) -> Iterator[SimpleNamespace]:
    """``RADIXFLOW_PLUGINS`` naming plugin ``name`` (``source``, written under ``tmp_path``),
    which imports ``slow_gate``: these events (``started``, ``proceed``) and ``more``. Its
    ``late`` policy, its module and the plugins' import state undone afterwards."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    gate = SimpleNamespace(started=threading.Event(), proceed=threading.Event(), **more)
    monkeypatch.setitem(sys.modules, "slow_gate", gate)
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv(PLUGINS_ENV, name)
    forget_plugins()
    try:
        yield gate
    finally:
        gate.proceed.set()
        dict.pop(SCHEDULING_POLICIES, "late", None)
        sys.modules.pop(name, None)
        forget_plugins()
