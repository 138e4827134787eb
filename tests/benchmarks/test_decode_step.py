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


def test_the_batches_take_turns_first_repeat_by_repeat(step, monkeypatch):
    # every repeat ran batch 1 before batch 2: drift between them fell on one side alone
    sizes: list[int] = []
    plain = step.run_round

    def run_round(model, kv, state, chunks):  # type: ignore[no-untyped-def]
        sizes.append(len(chunks))
        return plain(model, kv, state, chunks)

    monkeypatch.setattr(step, "run_round", run_round)
    step.bench("qwen3_5-tiny", [1, 2], 8, 2, own=False)
    assert sizes == [1, 2, 1, 2, 2, 1]  # the first two: the warm-up
