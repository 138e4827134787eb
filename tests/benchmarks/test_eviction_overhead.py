"""benchmarks/eviction_overhead.py: its repeats, and the arguments it refuses."""

from __future__ import annotations

import os

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark


@pytest.fixture(scope="module")
def overhead():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("eviction_overhead")


def test_every_repeat_runs_in_a_fresh_process(overhead):
    # one pool served every repeat: its one worker ran them all, its heap warm from the one before
    pids = overhead.repeated(os.getpid, (), 2)
    assert len(set(pids)) == 2 and os.getpid() not in pids
