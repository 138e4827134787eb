"""The suite keeps its state to itself: the workers of a parallel run (and other checkouts'
runs on the machine) share no model cache."""

from __future__ import annotations

import os
from pathlib import Path

from radixflow.models.zoo import CACHE_ENV


def test_a_test_that_asks_for_no_zoo_still_builds_into_this_workers_cache(tmp_path_factory):
    # benchmarks/test_decode_step.py, test_serve_replay.py and test_ray.py built qwen3_5-tiny and
    # the native kernels into ~/.cache/radixflow, which every worker and every checkout shares
    cache = Path(os.environ[CACHE_ENV])
    assert cache.is_relative_to(tmp_path_factory.getbasetemp())
