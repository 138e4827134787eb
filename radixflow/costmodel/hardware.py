"""Hardware profiles: the coefficients of the cost model, built in (with sources) or read from a file.

A profile says what one worker call costs: a fixed part (per call, per layer per call, per
scheduled sequence) plus the larger of compute time (FLOPs of each cost term at that term's
rate) and memory time (weights, KV reads and state copies at the memory bandwidth).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

# Cost terms whose FLOPs are timed (see costmodel.model.round_work).
COMPUTE_TERMS = ("matmul", "attention", "gdn", "mamba2", "conv", "lm_head")

# Public figures behind the GPU profiles. Each is an assumption of the sim, not a measurement here.
DENSE_BF16_FLOPS = 989e12
SRC_FLOPS = (
    "NVIDIA H100 / H200 datasheets: 989 TFLOP/s dense BF16 Tensor Core (1,979 is the sparse figure); "
    "the sim charges every term at this peak, a lower bound on compute time"
)
SRC_H100_MEM = "NVIDIA H100 SXM datasheet: 80 GB HBM3 at 3.35 TB/s"
SRC_H200_MEM = "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s"
LAYER_DISPATCH_S = 1.4e-3
SRC_DISPATCH = (
    "vLLM 0.18 CPU-side prefill dispatch measured at about 1.4 ms per transformer layer on H200 at "
    "batch ~1 (ai-dynamo/aiconfigurator PR #1166: +41 ms on Qwen3-0.6B's 28 layers); assumed the "
    "same on H100 (host-side cost)"
)
SRC_PER_SEQUENCE = (
    "no public per-sequence measurement used: a sequence costs only its state restore/snapshot "
    "copies, charged as memory traffic"
)


class ProfileError(ValueError):
    """A hardware profile file that cannot be used (one line, naming the key)."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    flops: float  # FLOP/s of a term with scale 1.0
    bandwidth: float | None  # bytes/s; None: memory time is not modelled apart (inside fitted terms)
    round_overhead_s: float  # fixed cost of one worker call
    per_request_s: float  # per scheduled chunk (metadata, launches per sequence)
    layer_overhead_s: float = 0.0  # fixed cost per layer per worker call (host-side dispatch)
    kind_scale: dict[str, float] = field(default_factory=dict)  # term -> cost per FLOP vs 1/flops
    weight_bytes: int = 2  # bytes per weight and per KV element
    memory_bytes: float | None = None  # device memory, for the record
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it comes from
    calibration: dict[str, Any] | None = None  # how a fitted profile was measured and how well it fits

    def seconds_per_flop(self, term: str) -> float:
        return self.kind_scale.get(term, 1.0) / self.flops

    def with_fixed_round_cost(self, seconds: float) -> HardwareProfile:
        """The same hardware with the whole fixed cost of a worker call set to ``seconds``."""
        return replace(self, round_overhead_s=seconds, layer_overhead_s=0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu(name: str, bandwidth: float, memory_gb: float, mem_source: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        flops=DENSE_BF16_FLOPS,
        bandwidth=bandwidth,
        round_overhead_s=0.0,
        per_request_s=0.0,
        layer_overhead_s=LAYER_DISPATCH_S,
        weight_bytes=2,
        memory_bytes=memory_gb * 1e9,
        sources={
            "flops": SRC_FLOPS,
            "bandwidth": mem_source,
            "layer_overhead_s": SRC_DISPATCH,
            "per_request_s": SRC_PER_SEQUENCE,
        },
    )


HARDWARE: dict[str, HardwareProfile] = {
    "h100": _gpu("h100", 3.35e12, 80, SRC_H100_MEM),
    "h200": _gpu("h200", 4.8e12, 141, SRC_H200_MEM),
    "cpu": HardwareProfile(
        "cpu",
        1.0e11,
        2.0e10,
        2e-3,
        1e-3,
        weight_bytes=4,
        sources={"all": "rough figures for a small CPU; `radixflow calibrate` measures a real profile"},
    ),
}


def _number(data: dict[str, Any], key: str, *, optional: bool = False) -> float | None:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ProfileError(f"profile key {key!r} must be a finite number >= 0, got {value!r}")
    return float(value)


def profile_from_dict(data: Any, origin: str = "profile") -> HardwareProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a JSON object")
    known = {f.name for f in fields(HardwareProfile)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ProfileError(f"{origin}: unknown profile key {unknown[0]!r}")
    flops = _number(data, "flops")
    if not flops:
        raise ProfileError(f"{origin}: profile key 'flops' must be positive")
    scale = data.get("kind_scale") or {}
    if not isinstance(scale, dict) or set(scale) - set(COMPUTE_TERMS):
        raise ProfileError(f"{origin}: profile key 'kind_scale' must map terms {', '.join(COMPUTE_TERMS)}")
    return HardwareProfile(
        name=str(data.get("name") or Path(origin).stem),
        flops=flops,
        bandwidth=_number(data, "bandwidth", optional=True) or None,
        round_overhead_s=_number(data, "round_overhead_s") or 0.0,
        per_request_s=_number(data, "per_request_s") or 0.0,
        layer_overhead_s=_number(data, "layer_overhead_s", optional=True) or 0.0,
        kind_scale={k: float(_number(scale, k) or 0.0) for k in scale},
        weight_bytes=int(_number(data, "weight_bytes", optional=True) or 2),
        memory_bytes=_number(data, "memory_bytes", optional=True),
        sources={str(k): str(v) for k, v in (data.get("sources") or {}).items()},
        calibration=data.get("calibration"),
    )


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile JSON file (as written by `radixflow calibrate`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ProfileError(f"cannot read hardware profile {path}: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProfileError(f"hardware profile {path} is not valid JSON: {e}") from None
    return profile_from_dict(data, str(path))


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    Path(path).write_text(json.dumps(profile.to_dict(), indent=2) + "\n")


def resolve_hardware(name_or_path: str) -> HardwareProfile:
    """A built-in profile by name, or a profile file by path."""
    if name_or_path in HARDWARE:
        return HARDWARE[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        return load_profile(path)
    raise ProfileError(
        f"unknown hardware {name_or_path!r}: not one of {', '.join(HARDWARE)} and not a profile file"
    )
