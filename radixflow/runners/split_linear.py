"""A large Linear on two cores: its output columns in two halves, one on a helper thread.

`radixflow serve` runs its forward passes on one torch thread: with two OpenMP threads the
HTTP side, the tokenizers and (in `benchmarks/serve_load.py`) the load generator preempt one of
them, and OpenMP's static split makes the whole product wait for that straggler. Yet on a
two-core machine the engine thread is the bottleneck while the other core is mostly idle.

`SplitLinear` hands the second half of the output columns to a helper thread and computes the
first half itself. If the helper has not started its half when the caller is done with its own
(its core is busy), the caller takes it back and computes it too: a busy core costs a round the
handoff, never a wait. Each output element is the same single-threaded MKL product over the
same row of the weight, so the split changes which thread computes a column, not what it holds.

Only products of at least `MIN_MACS` multiply-adds are split: below that the handoff (tens of
microseconds) costs more than half the product.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from enum import Enum

import torch
import torch.nn.functional as F

# Products smaller than this run whole: a handoff costs ~30-60 us on the 2-core machine this was
# written on, and 2^24 multiply-adds take ~0.3 ms on one core there (not measured elsewhere).
MIN_MACS = 1 << 24


class _Job(Enum):
    IDLE = "idle"
    QUEUED = "queued"  # submitted, not yet started: the caller may take it back
    RUNNING = "running"
    DONE = "done"


class ColumnHelper:
    """One daemon thread that runs one submitted product at a time (owns the thread)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._state = _Job.IDLE
        self._job: Callable[[], torch.Tensor] | None = None
        self._result: torch.Tensor | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._loop, name="radixflow-matmul", daemon=True).start()

    def submit(self, job: Callable[[], torch.Tensor]) -> None:
        """Queue ``job`` (mutates the helper); one job at a time, collected before the next."""
        with self._cv:
            assert self._state is _Job.IDLE, "a split product was submitted before the last was collected"
            self._job, self._state = job, _Job.QUEUED
            self._cv.notify_all()

    def collect(self) -> torch.Tensor:
        """The submitted job's result: computed here if the helper has not started it, else
        waited for (mutates the helper back to idle)."""
        with self._cv:
            if self._state is _Job.QUEUED:
                job, self._job, self._state = self._job, None, _Job.IDLE
            else:
                while self._state is not _Job.DONE:
                    self._cv.wait()
                job, result, error = None, self._result, self._error
                self._job, self._result, self._error, self._state = None, None, None, _Job.IDLE
        if job is not None:
            return job()
        if error is not None:
            raise error
        assert result is not None
        return result

    def _loop(self) -> None:
        torch.set_num_threads(1)  # OpenMP's thread count is per thread: this one must not fan out
        while True:
            with self._cv:
                while self._state is not _Job.QUEUED:
                    self._cv.wait()
                job, self._state = self._job, _Job.RUNNING
            assert job is not None
            result, error = None, None
            try:
                result = job()
            except BaseException as e:  # handed to the caller by `collect`
                error = e
            with self._cv:
                self._result, self._error, self._state = result, error, _Job.DONE
                self._cv.notify_all()


class SplitLinear:
    """The `LinearBackend` that splits large products across the caller and a helper thread."""

    name = "split"

    def __init__(self) -> None:
        self._helper: ColumnHelper | None = None
        # one split at a time: a second thread calling in meanwhile (two engines in one process)
        # computes its product whole instead of waiting
        self._busy = threading.Lock()

    def usable(self) -> bool:
        if hasattr(os, "sched_getaffinity"):  # the CPUs this process may run on (Linux)
            return len(os.sched_getaffinity(0)) >= 2
        return (os.cpu_count() or 1) >= 2

    def prepare(self, weight: torch.Tensor) -> torch.Tensor:
        return weight  # the halves are row slices of the weight: contiguous views

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        out_features = weight.shape[0]
        rows = x.numel() // max(x.shape[-1], 1)
        if rows * weight.numel() < MIN_MACS or out_features < 2 or not self._busy.acquire(blocking=False):
            return F.linear(x, weight, bias)
        try:
            half = out_features // 2
            b1, b2 = (None, None) if bias is None else (bias[:half], bias[half:])
            helper = self._helper or self._start()
            helper.submit(_in_caller_mode(lambda: F.linear(x, weight[half:], b2)))
            first = F.linear(x, weight[:half], b1)
            return torch.cat([first, helper.collect()], dim=-1)
        finally:
            self._busy.release()

    def _start(self) -> ColumnHelper:
        self._helper = ColumnHelper()
        return self._helper


def _in_caller_mode(job: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """``job`` under the calling thread's grad and inference modes (both are per thread)."""
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def run() -> torch.Tensor:
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            return job()

    return run
