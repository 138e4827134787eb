"""`SchedulerConfig`'s own checks: a hand-built config's mistake is named with its value."""

from __future__ import annotations

import pytest
from engine_utils import new_engine

from radixflow.runners.sim import HARDWARE, SIM_MODELS, SimRunner
from radixflow.scheduler import Request, SchedulerConfig
from radixflow.scheduler.sampling import SamplingParams


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"block_size": 0}, "block_size: must be at least 1, got 0"),
        ({"max_requests": 0}, "max_requests: must be at least 1, got 0"),
        ({"max_requests": -2}, "max_requests: must be at least 1, got -2"),
        ({"num_blocks": -1}, "num_blocks: must be at least 0, got -1"),
        ({"num_state_slots": -3}, "num_state_slots: must be at least 0, got -3"),
        # a float ran until a slice or range met it (a bare TypeError, no field named); a bool was
        # taken as 1 or 0
        ({"token_budget": float("nan")}, "token_budget: must be an integer, got nan"),
        ({"token_budget": 64.5}, "token_budget: must be an integer, got 64.5"),
        ({"block_size": 8.0}, "block_size: must be an integer, got 8.0"),
        ({"num_blocks": 256.5}, "num_blocks: must be an integer, got 256.5"),
        ({"max_requests": True}, "max_requests: must be an integer, got True"),
        ({"cache_memory": True}, "cache_memory: must be an integer, got True"),
        # a budget below one byte was passed on and refused by the cache's ledger in its own words
        # ('cache budget must be >= 0 bytes, got -5', no field named), or, at 0, failed every
        # request as not fitting (the options refuse it: at least one byte)
        ({"cache_memory": -5}, "cache_memory: must be at least 1, got -5"),
        ({"cache_memory": 0}, "cache_memory: must be at least 1, got 0"),
    ],
)
def test_a_bad_field_is_named_with_its_value_before_anything_is_built(fields, message):
    """An engine over a hand-built config: block_size 0 was reported as the cache's 'entry sizes
    must be at least one byte: 0, ...', max_requests 0 without its value, a negative capacity by
    the cache's pool name ('KV blocks capacity must be >= 0')."""
    runner = SimRunner(SIM_MODELS["qwen3_5-2b"], HARDWARE["h100"])
    with pytest.raises(ValueError) as raised:
        new_engine(runner, SchedulerConfig(**fields))
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "message"),
    [
        (
            29,
            1,
            "prompt: does not fit: 29 tokens span several rounds (token budget 16) and need a state "
            "slot; the cache has none (state_slots)",
        ),
        (8, 2, "max_tokens: decoding several tokens needs a state slot; the cache has none (state_slots)"),
    ],
)
def test_a_request_that_needs_a_state_slot_of_a_cache_with_none_names_the_option(prompt, max_tokens, message):
    """`--state-slots 0` on a hybrid model: the refusal said the cache has no state slot but not
    which option gives it some (the KV refusal names kv_blocks)."""
    cfg = SchedulerConfig(token_budget=16, max_requests=4, block_size=8, num_blocks=64, num_state_slots=0)
    req = Request("r", tuple(range(1, prompt + 1)), sampling=SamplingParams(max_tokens=max_tokens))
    assert str(cfg.unfit_reason(req)) == message
