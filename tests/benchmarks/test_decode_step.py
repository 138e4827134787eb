"""benchmarks/decode_step.py: each batch's round time with its spread beside its median."""

from __future__ import annotations

import pytest
from benchmark_utils import load_benchmark


@pytest.fixture(scope="module")
def step():
    return load_benchmark("decode_step")


def test_each_batch_has_its_spread_beside_its_median(step):
    # medians alone: batch 8 against batch 1 could not be read against the repeats' spread
    result = step.bench("qwen3_5-tiny", [1, 2], 8, 3, own=False)
    for row in result["batches"].values():
        for clock in ("round_ms", "round_cpu_ms"):
            low, high = row[f"{clock}_spread"]
            assert low <= row[clock] <= high
