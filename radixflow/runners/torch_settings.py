"""What the torch runner refuses of its settings before it reads a model: a device this machine
lacks, a matmul plan it cannot route, kernels that cannot run on that device and dtype. Asked by
the runner itself and by every door's option check (`options.runners.torch_settings_problem`),
a fleet's ingress included, before any replica loads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from radixflow.models.device import DeviceError, check_device, parse_device
from radixflow.models.kernels.backend import kernels_refusal
from radixflow.problems import Problem
from radixflow.runners.matmul import parse_plan, unusable


def settings_problem(
    matmul: str, kernels: str, device: str, dtype: torch.dtype, local: bool = True
) -> Problem | None:
    """What the runner refuses of option ``device``, ``matmul`` and ``kernels`` on ``device`` in
    ``dtype`` before it reads the model (None: nothing; building the native library may still
    fail). ``local``: the runner runs on this machine, so the device and a plan's backends must
    be here. A fleet's ingress asks this before any replica loads."""
    try:  # first: the checks below read the device name, and torch's refusal of one is a traceback
        check_device(device) if local else parse_device(device)
    except DeviceError as e:
        return Problem("device", str(e))
    given = parse_plan(matmul)
    if isinstance(given, Problem):
        return given
    if given is not None and local and (missing := unusable(given)):
        return Problem("matmul", "; ".join(missing))
    if given is not None and not routes_matmuls(device, dtype):  # else torch's own GEMM runs, silently
        where = f"not {device} in {str(dtype).removeprefix('torch.')}: leave it auto"
        return Problem("matmul", f"plans route CPU float32 matmuls only, {where}")
    refused = kernels_refusal(kernels, device, dtype)
    return None if refused is None else Problem("kernels", refused)


def routes_matmuls(device: str, dtype: torch.dtype) -> bool:
    """Whether a matmul plan applies: the plans route CPU float32 Linear layers only."""
    return torch.device(device).type == "cpu" and dtype == torch.float32


@contextmanager
def thread_count(threads: int) -> Iterator[None]:
    """torch's intra-op thread count at ``threads`` for the block, the process's own restored
    after. The count is the process's: a runner pins the one it was built with (its matmul plan
    was measured and its round profile keyed on it) against another runner built since on other
    threads. Set only where it differs: a process with one runner never pays for the call."""
    before = torch.get_num_threads()
    if before == threads:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
