"""An engine stepped by one thread and asked from another (a cancel button's `stop`): what changes
requests waits for the round running to end (`engine/round_lock.py`)."""

from __future__ import annotations

import threading

import pytest
from engine_utils import new_engine
from thread_utils import AskedLock

from radixflow.engine.records import AbortResult
from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.sampling import SamplingParams

CFG = SchedulerConfig(token_budget=64, max_requests=4, block_size=8, num_blocks=64, num_state_slots=8)


ENDS = [("stop", RequestStatus.FINISHED), ("abort", RequestStatus.ABORTED)]


@pytest.mark.parametrize(("end", "status"), ENDS)
def test_a_request_ended_from_another_thread_mid_round_ends_after_that_round(end, status):
    # it ended in the middle of the round: the round's update then raised KeyError, every
    # request's results lost
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    engine = new_engine(runner, CFG)
    in_round, go, asked = threading.Event(), threading.Event(), threading.Event()
    engine._round_lock = AskedLock("ender", asked, threading.RLock())  # told when the ender asks for it
    run = runner.run

    def held_run(out):  # the first round waits in its worker call until the test lets it go
        in_round.set()
        go.wait(timeout=30)  # a safety net for a broken test, never the synchronisation
        return run(out)

    runner.run = held_run
    reqs = [Request(f"r{i}", (1, 2, 3, 4 + i), sampling=SamplingParams(max_tokens=4)) for i in range(2)]
    for req in reqs:
        engine.submit(req)
    stepping = threading.Thread(target=engine.step, daemon=True)
    stepping.start()
    assert in_round.wait(timeout=30)
    said: list[AbortResult] = []

    def ender() -> None:
        said.append(getattr(engine, end)("r0"))
        asked.set()  # before the fix it never asks: it ends the request at once

    ending = threading.Thread(target=ender, name="ender", daemon=True)
    ending.start()
    assert asked.wait(timeout=30)
    go.set()
    stepping.join(timeout=30)
    ending.join(timeout=30)
    assert not stepping.is_alive() and len(engine.rounds) == 1  # the round stood, whole
    assert said == [AbortResult.STOPPED if end == "stop" else AbortResult.ABORTED]
    assert reqs[0].status is status and len(reqs[0].output) == 1  # the round's token kept
    if end == "stop":
        assert reqs[0].finish_reason is FinishReason.STOP
    runner.run = run
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert reqs[1].status is RequestStatus.FINISHED and len(reqs[1].output) == 4
