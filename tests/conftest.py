"""Suite-wide settings.

Torch runs on one thread: the test models are tiny, so a second thread buys little on two cores
and costs a great deal when the machine is shared (measured here: 54 s -> 14 s for three model
test modules under load).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

# Generated tests draw the same examples every run unless asked: a red run must be red on every
# clone (a random draw once failed CI on a case no earlier run had drawn). HYPOTHESIS_PROFILE=explore
# draws fresh examples, to hunt for new failures; a failure it finds is kept as an @example.
# No deadline: hypothesis fails an example past 200 ms by default, which a few-ms example
# descheduled on a busy machine exceeds (pytest-timeout bounds a hang instead).
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal gives it, whoever started the tests: a shell's background job (``cmd &``
    without job control) starts with SIGINT ignored, and then Python raises no KeyboardInterrupt
    and the processes the tests start inherit the ignoring, so every test of what a Ctrl-C does
    failed in such a run (the product is right to leave an ignored SIGINT ignored)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # a hangup as a terminal gives it: a run under `nohup` starts with SIGHUP ignored, which the
    # processes the tests start inherit, and every test of what a hangup does timed out or failed
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


try:
    import torch
except ImportError:  # the cache/scheduler tests run without the torch extra
    torch = None

if torch is not None:
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """One thread again after a test that built a runner on more (the runner sets the process's
    count and leaves it): the next test, maybe another file's, ran on them otherwise."""
    yield
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.getbasetemp() / "zoo")  # each xdist worker has its own basetemp


@pytest.fixture(scope="session", autouse=True)
def _own_cache(tmp_path_factory) -> Iterator[None]:
    """Every test (and every process it starts) builds zoo models, native kernels and round
    profiles into this worker's temporary cache: a test that named a model without asking for
    `zoo` built it into ~/.cache/radixflow, which the other workers and checkouts share (and a
    profile stored there by someone else changed what the test saw)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RADIXFLOW_CACHE", _session_cache(tmp_path_factory))
        yield


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Iterator[None]:
    """Zoo models built into this session's temporary cache, not the user's (as `_own_cache`
    sets it for every test; kept for the modules that name it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RADIXFLOW_CACHE", _session_cache(tmp_path_factory))
        yield
