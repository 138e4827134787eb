"""The sim runner against a request's sampling rules: what it honours, what it refuses (no torch)."""

from __future__ import annotations

import pytest
from engine_utils import new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, RequestStatus, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams

RUNNER = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
CFG = SchedulerConfig(token_budget=128, max_requests=8, block_size=8, num_blocks=256, num_state_slots=32)
PROMPT = (1, 2, 3)


def run(**params: object) -> Request:
    req = Request("r", PROMPT, sampling=SamplingParams(**params))  # type: ignore[arg-type]
    new_engine(RUNNER, CFG).run([req])
    return req


@pytest.mark.parametrize("k", [0, 3])
def test_logprobs_are_refused_the_sim_computes_none(k):
    """The sim answered logprobs=k with logprob 0 and no alternatives: nothing computed."""
    req = run(max_tokens=2, logprobs=k)
    assert req.status is RequestStatus.FAILED
    assert req.error == "logprobs: the sim runner computes no logits: they need the torch runner"
