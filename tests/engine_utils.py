"""Test helper shared by the engine-level tests: run requests to the end, checking every round."""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.engine.engine import Engine
from radixflow.engine.events import EngineEvents
from radixflow.engine.records import AbortResult
from radixflow.engine.runner import Runner
from radixflow.options import EngineOptions, build
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig


def drive(engine: Engine, reqs: list[Request]) -> Engine:
    """Submit ``reqs`` and step until nothing is left, with the integrity checks after each round."""
    for r in reqs:
        engine.submit(r)
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    return engine


def new_engine(
    runner: Runner,
    config: SchedulerConfig,
    policy: str | None = None,
    placement: str | None = None,
    round_history: int | None = None,
    events: EngineEvents | None = None,
    eviction: str | None = None,
    admission: str | None = None,
) -> Engine:
    """An engine over a hand-built runner and config, through the one builder: what a test leaves
    out is `EngineOptions`' default (the engine has none of its own)."""
    given = {"eviction": eviction, "admission": admission}
    options = EngineOptions(**{k: v for k, v in given.items() if v is not None})
    return build.new_engine(runner, config, options, policy, placement, round_history, events)


@dataclass(frozen=True)
class Engines:
    """A hand-built runner and config as the bench harness's engine source (`run_policies`)."""

    runner: Runner
    scheduler: SchedulerConfig

    def engine(
        self,
        policy: str | None = None,
        placement: str | None = None,
        round_history: int | None = None,
        label: str | None = None,
    ) -> Engine:
        return new_engine(self.runner, self.scheduler, policy, placement, round_history)


def end_request(
    engine: Engine, request: Request, abort: bool, ended: dict[str, RequestStatus], where: object
) -> None:
    """Abort or stop ``request`` between steps as a fuzz does, asserting the engine's answer, and
    note the status it must end with in ``ended`` (nothing when it was already done)."""
    done = request.status.done
    result = (engine.abort if abort else engine.stop)(request.id)
    assert (result is AbortResult.ALREADY_DONE) == done, (where, request.id)
    if not done:
        ended[request.id] = RequestStatus.ABORTED if abort else RequestStatus.FINISHED
    engine.check_integrity()
