"""What the torch runner refuses of its settings before it reads a model: a device this machine
lacks, a matmul plan it cannot route, kernels that cannot run on that device and dtype. Asked by
the runner itself and by every door's option check (`options.runners.torch_settings_problem`),
a fleet's ingress included, before any replica loads."""

from __future__ import annotations

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
