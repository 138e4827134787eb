"""Which torch devices exist on this machine: a bad ``--device`` is refused before any model work."""

from __future__ import annotations

from collections.abc import Callable

import torch


class DeviceError(ValueError):
    """A device name torch does not know, or a device this machine or torch build lacks."""


def _count(module_name: str) -> Callable[[], int]:
    """Devices of one accelerator backend visible here (0 when the build lacks the backend)."""

    def count() -> int:
        backend = getattr(torch, module_name, None)
        if backend is None or not backend.is_available():
            return 0
        return int(backend.device_count())

    return count


def _mps_count() -> int:
    mps = getattr(torch.backends, "mps", None)
    return 1 if mps is not None and mps.is_available() else 0


# device type -> how many such devices are usable here; types missing here are refused
BACKENDS: dict[str, Callable[[], int]] = {
    "cpu": lambda: 1,
    "cuda": _count("cuda"),
    "xpu": _count("xpu"),
    "mps": _mps_count,
}


def available_devices() -> list[str]:
    """Names of the usable devices, ``cpu`` first (then ``cuda:0``, ``cuda:1``, ... when present)."""
    out = ["cpu"]
    for kind, count in BACKENDS.items():
        if kind != "cpu":
            out.extend(f"{kind}:{i}" for i in range(count()))
    return out


def parse_device(name: str | torch.device, note: str = "") -> torch.device:
    """``name`` as a `torch.device` of a type the torch runner supports, whether or not this
    machine has one (a Ray cluster's may); otherwise `DeviceError` (``note`` appended)."""
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise DeviceError(f"unknown device {str(name)!r}{note}") from None
    if device.type not in BACKENDS:
        raise DeviceError(f"device type {device.type!r} is not supported by the torch runner{note}")
    return device


def check_device(name: str | torch.device) -> torch.device:
    """``name`` as a `torch.device` usable here; otherwise `DeviceError` naming the devices there are.

    Cheap (no model, no allocation), so callers check before building or loading anything.
    """
    here = f"(available here: {', '.join(available_devices())})"
    device = parse_device(name, f" {here}")
    n = BACKENDS[device.type]()
    if n == 0:
        raise DeviceError(f"device {str(name)!r} is not available{_why(device.type)} {here}")
    if device.type != "cpu" and device.index is not None and device.index >= n:
        raise DeviceError(f"device {str(name)!r} does not exist: {n} {device.type} device(s) {here}")
    return device


def _why(kind: str) -> str:
    if kind == "cuda" and torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return ": this torch build has no CUDA support"
    return ""


def resolve_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """The torch dtype the runner uses for engine option ``dtype`` on ``device``.

    ``auto`` is float32 on a CPU (exact against transformers' float32 reference), bfloat16 on a
    CUDA device that supports it and float16 on one that does not. bfloat16 is allowed on a CPU
    (every family runs; slower than float32 there, logprobs off float32's by tenths); float16
    is refused off CUDA (CPU half kernels are slow or missing). Raises `DeviceError` naming the
    refused pair.
    """
    kind = torch.device(device).type
    if name == "auto":
        if kind != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(name)
    if dtype is None:
        raise DeviceError(f"{name!r} is not one of auto, float32, bfloat16, float16")
    if dtype == torch.float16 and kind != "cuda":
        raise DeviceError(f"float16 runs on cuda only, not on {kind} (use float32 or bfloat16)")
    return dtype
