"""Test helper shared by the engine-level tests: run requests to the end, checking every round."""

from __future__ import annotations

from radixflow.engine.engine import Engine
from radixflow.scheduler import Request


def drive(engine: Engine, reqs: list[Request]) -> Engine:
    """Submit ``reqs`` and step until nothing is left, with the integrity checks after each round."""
    for r in reqs:
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    return engine
