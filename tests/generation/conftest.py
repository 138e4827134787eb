"""Fixtures of the generation tests that check every family against a roomy engine."""

from __future__ import annotations

import pytest
from model_utils import ZOO_TINY, state_slots

from radixflow.generation import LLM


@pytest.fixture(scope="module")
def roomy(zoo) -> dict[str, LLM]:
    """Every family's tiny preset in an engine with room for everything: the reference a scarce
    engine's outputs are compared with."""
    return {m: LLM(m, kv_blocks=64, torch_threads=1, **state_slots(m, 16)) for m in ZOO_TINY}
