"""A lock that tells a test when a given thread asks for it: the test then knows that thread is
waiting (or about to wait) on it, with no sleep deciding anything."""

from __future__ import annotations

import threading
from typing import Protocol


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
