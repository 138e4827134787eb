"""The suite's own machinery: the workers of a parallel run (and other checkouts' runs on the
machine) share no model cache, and a test's own time limit keeps the one every test has."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from signal_utils import time_limit

from radixflow.models.zoo import CACHE_ENV


def test_a_test_that_asks_for_no_zoo_still_builds_into_this_workers_cache(tmp_path_factory):
    # benchmarks/test_decode_step.py, test_serve_replay.py and test_ray.py built qwen3_5-tiny and
    # the native kernels into ~/.cache/radixflow, which every worker and every checkout shares
    cache = Path(os.environ[CACHE_ENV])
    assert cache.is_relative_to(tmp_path_factory.getbasetemp())


def test_a_tests_own_time_limit_leaves_pytest_timeouts_alarm_armed():
    # pytest-timeout (signal method) bounds every test with SIGALRM's timer; a time_limit of a
    # test's own cancelled that timer on its way out, so the rest of that test (every later
    # hypothesis example) could hang for good again
    outer = signal.signal(signal.SIGALRM, lambda *_: None)
    before = signal.setitimer(signal.ITIMER_REAL, 500)
    try:
        with time_limit(30):
            pass
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, *before)
        signal.signal(signal.SIGALRM, outer)
    assert 0 < left <= 500  # armed again, with what was left of it


def test_a_test_may_build_a_runner_on_more_torch_threads():
    # the torch runner sets the process's thread count (`footprint.set_torch_threads`) and leaves
    # it: test_errors' serve test left a worker on 2 threads for whatever file it ran next
    torch = pytest.importorskip("torch")
    from radixflow.runners.footprint import set_torch_threads

    set_torch_threads(2, cpus=1)  # given: set as given (a given count is checked elsewhere)
    assert torch.get_num_threads() == 2


def test_the_next_test_runs_on_one_torch_thread_again():
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == 1  # conftest's: the suite's tests assume one


@given(st.just(0))
@settings(max_examples=1)
def test_a_generated_example_slowed_by_a_busy_machine_is_not_a_failure(_):
    # hypothesis fails an example past 200 ms (DeadlineExceeded, or Flaky when its replay is
    # quicker): a few-ms example of test_queue, test_curves or test_measured descheduled that long
    # on a loaded machine failed the run. The suite's profiles set no deadline (the test's own
    # timeout bounds a hang)
    time.sleep(0.3)
    assert settings().deadline is None
