"""A running request's sequence as its chunks carry it (`ChunkWriter.sequence`): a decode step
appends its new tokens to the last chunk's tuple instead of copying the whole output again, and
gives what `Request.sequence` gives, however the output changed."""

from __future__ import annotations

import pytest
from engine_utils import drive, new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams

RUNNER = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
CFG = SchedulerConfig(token_budget=64, max_requests=8, block_size=8, num_blocks=256, num_state_slots=32)


class CountedOutput(list):
    """An output list that counts the walks over all of it (a tuple made of it is one)."""

    walks = 0

    def __iter__(self):
        CountedOutput.walks += 1
        return super().__iter__()


def test_a_decode_step_does_not_copy_the_whole_output() -> None:
    req = Request("a", tuple(range(1, 21)), sampling=SamplingParams(max_tokens=60), output=CountedOutput())
    CountedOutput.walks = 0
    engine = drive(new_engine(RUNNER, CFG), [req])
    assert len(req.output) == 60 and len(engine.rounds) == 60
    assert CountedOutput.walks < 10  # one per decode step before: 59


def test_the_sequence_follows_the_output_however_it_changed() -> None:
    engine = new_engine(RUNNER, CFG)
    writer = engine.scheduler.writer
    req = Request("a", (1, 2, 3))
    steps = [
        lambda: None,
        lambda: req.output.append(4),
        lambda: req.output.extend([5, 6]),
        lambda: None,
        lambda: setattr(req, "output", [9, 9, 9]),  # a new list (a remote engine's answer)
        lambda: req.output.append(10),
        lambda: req.output.clear(),
        lambda: req.output.extend([7, 7, 7, 7, 7]),  # as long as before, other tokens
        lambda: setattr(req, "prompt", (8, 8)),
    ]
    for step in steps:
        step()
        assert writer.sequence(req) == req.sequence
    writer.release(req, running=False)
    assert writer.sequence(req) == req.sequence


def test_a_sequence_kept_for_a_request_that_does_not_run_is_an_integrity_error() -> None:
    engine = new_engine(RUNNER, CFG)
    engine.scheduler.writer.sequence(Request("gone", (1, 2, 3)))
    with pytest.raises(AssertionError, match="sequences kept for requests not running: gone"):
        engine.check_integrity()
