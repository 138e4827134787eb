"""A round's chunks never corrupt recurrent state: `round_problem`, which
`Scheduler.check_integrity` applies to the last round scheduled."""

from __future__ import annotations

import pytest
from engine_utils import drive, new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.output import ScheduledChunk, SnapshotSpec, round_problem


def chunk(
    rid: str, restore: int | None = None, saves: tuple[int, ...] = (), own: bool = False
) -> ScheduledChunk:
    return ScheduledChunk(
        request_id=rid, namespace="", tokens=tuple(range(32)), start=16, end=32, block_table=(0, 1),
        restore_slot=restore, snapshots=tuple(SnapshotSpec(32, s, own) for s in saves), sample=True,
    )  # fmt: skip


def test_a_follower_after_its_producer_and_a_chunk_resaving_its_own_slot_are_fine():
    producer, follower = chunk("p", saves=(3,)), chunk("c", restore=3, saves=(4,))
    own = chunk("w", restore=5, saves=(5,), own=True)  # its working state, read then written
    assert round_problem([producer, follower, own]) is None


def test_two_chunks_saving_one_slot_are_a_problem():
    problem = round_problem([chunk("a", saves=(3,)), chunk("b", saves=(2, 3))])
    assert problem == "slot 3 is saved by both a and b"


def test_restoring_a_slot_a_later_chunk_saves_is_a_problem():
    problem = round_problem([chunk("c", restore=3), chunk("p", saves=(3,))])
    assert problem == "c restores slot 3 before p saves it"


def test_check_integrity_checks_the_last_round():
    cfg = SchedulerConfig(token_budget=64, max_requests=4, block_size=16, num_blocks=32, num_state_slots=8)
    engine = drive(
        new_engine(SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"]), cfg),
        [Request("r", tuple(range(1, 40)))],
    )
    engine.check_integrity()  # a real round passes
    engine.scheduler.last_round.chunks[:] = [chunk("a", saves=(3,)), chunk("b", saves=(3,))]
    with pytest.raises(AssertionError, match="slot 3 is saved by both a and b"):
        engine.check_integrity()
