"""Hardware profiles: the coefficients of the cost model, built in (with sources) or read from a file.

A profile says what one worker call costs: a fixed part (per call, per layer per call, per
scheduled sequence) plus the larger of compute time (FLOPs of each cost term at that term's
rate) and memory time (weights, KV reads and state copies at the memory bandwidth).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from radixflow.problems import Problem

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


# Bounds on a profile's figures. Inside them every time the sim computes stays finite (the largest
# sim model does ~1e16 FLOP per round; at the slowest rate and largest scale that is ~1e16 s, far
# from float overflow), and outside them a figure is a unit mistake, not hardware.
MIN_RATE = 1e6  # FLOP/s and B/s: a 1980s microprocessor; the built-in CPU profile has 1e11 FLOP/s
MAX_FLOPS = 1e18  # 1 EFLOP/s: about 1000x the H100/H200's 989 TFLOP/s dense BF16
MAX_BANDWIDTH = 1e15  # 1 PB/s: about 200x the H200's 4.8 TB/s HBM3e
MAX_OVERHEAD_S = 3600.0  # a fixed cost (per call, layer or sequence) of one hour; measured ones are ~1 ms
MAX_KIND_SCALE = 1e6  # a term's cost per FLOP relative to the flops rate; 0 (free) is what a fit may find
MAX_WEIGHT_BYTES = 8  # float64
MAX_MEMORY_BYTES = 1e15  # 1 PB of device memory


class ProfileError(ValueError):
    """A hardware profile that cannot be used (one line, naming the key and the value).

    ``problem``: the same as data, its ``param`` the profile key (None when no single key is at fault).
    """

    def __init__(self, message: str, problem: Problem | None = None) -> None:
        super().__init__(message)
        self.problem = problem if problem is not None else Problem(None, message)


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

    def __post_init__(self) -> None:
        """Every profile, however made (file, fit, `replace`), is one the sim can use."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if problems := profile_problems(values):
            raise _error(f"hardware profile {self.name!r}", problems[0])

    def seconds_per_flop(self, term: str) -> float:
        return self.kind_scale.get(term, 1.0) / self.flops

    def with_fixed_round_cost(self, seconds: float) -> HardwareProfile:
        """The same hardware with the whole fixed cost of a worker call set to ``seconds``."""
        return replace(self, round_overhead_s=seconds, layer_overhead_s=0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Range:
    """A number (never a bool or a string) from ``low`` to ``high``; NaN and infinity never are."""

    low: float
    high: float
    unit: str
    optional: bool = False  # may be null / absent

    def __call__(self, key: str, value: object) -> Problem | None:
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is not None and math.isfinite(number) and self.low <= number <= self.high:
            return None
        return Problem(key, f"must be {self.describe()}, got {_show(value)}")

    def describe(self) -> str:
        null = ", or null" if self.optional else ""
        return f"a number from {self.low:g} to {self.high:g} ({self.unit}){null}"


def _show(value: object) -> str:
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(key: str, value: object) -> Problem | None:
    ok = isinstance(value, str) and value
    return None if ok else Problem(key, f"must be a non-empty string, got {_show(value)}")


def _weight_bytes(key: str, value: object) -> Problem | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WEIGHT_BYTES
    return (
        None if ok else Problem(key, f"must be an integer from 1 to {MAX_WEIGHT_BYTES}, got {_show(value)}")
    )


def _kind_scale(key: str, value: object) -> Problem | None:
    """Known cost terms to scales (0 is a term a fit found free)."""
    if not isinstance(value, dict):
        return Problem(key, f"must be a JSON object of cost terms to numbers, got {_show(value)}")
    scale = _Range(0.0, MAX_KIND_SCALE, "times the flops rate's cost")
    for term, v in value.items():
        if term not in COMPUTE_TERMS:
            return Problem(key, f"unknown term {term!r} (terms: {', '.join(COMPUTE_TERMS)})")
        if problem := scale(term, v):
            return Problem(key, f"entry {problem}")
    return None


def _sources(key: str, value: object) -> Problem | None:
    if not isinstance(value, dict):
        return Problem(key, f"must be a JSON object of figures to strings, got {_show(value)}")
    bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
    return None if bad is None else Problem(key, f"entry {bad!r} must be a string, got {_show(value[bad])}")


def _calibration(key: str, value: object) -> Problem | None:
    ok = isinstance(value, dict)
    return None if ok else Problem(key, f"must be a JSON object or null, got {_show(value)}")


# Each profile key's check. A key absent here is not a profile key.
_CHECKS: dict[str, Callable[[str, object], Problem | None]] = {
    "name": _name,
    "flops": _Range(MIN_RATE, MAX_FLOPS, "FLOP/s"),
    "bandwidth": _Range(MIN_RATE, MAX_BANDWIDTH, "B/s", optional=True),
    "round_overhead_s": _Range(0.0, MAX_OVERHEAD_S, "s"),
    "per_request_s": _Range(0.0, MAX_OVERHEAD_S, "s"),
    "layer_overhead_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "kind_scale": _kind_scale,
    "weight_bytes": _weight_bytes,
    "memory_bytes": _Range(1.0, MAX_MEMORY_BYTES, "bytes", optional=True),
    "sources": _sources,
    "calibration": _calibration,
}
_REQUIRED = ("flops", "round_overhead_s", "per_request_s")


def profile_problems(data: dict[str, Any]) -> list[Problem]:
    """Why ``data`` (profile key -> value, as in a profile file) is not a usable profile: unknown
    keys, missing ones, wrong types (no coercion: ``"1e12"`` is not a number) and out-of-range
    values. Null stands for an optional key's absence. Pure."""
    problems = [Problem(k, "is not a profile key") for k in data if k not in _CHECKS]
    for key, check in _CHECKS.items():
        value = data.get(key)
        if value is None and key in _REQUIRED:
            problems.append(Problem(key, f"missing (must be {check.describe()})"))  # type: ignore[attr-defined]
        elif value is not None and (problem := check(key, value)) is not None:
            problems.append(problem)
    return problems


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


def _error(origin: str, problem: Problem) -> ProfileError:
    if problem.param is None:
        return ProfileError(f"{origin}: {problem.message}", problem)
    return ProfileError(f"{origin}: profile key {problem.param!r} {problem.message}", problem)


def profile_from_dict(data: Any, origin: str = "profile") -> HardwareProfile:
    """A profile from parsed JSON, every key checked (`profile_problems`); ``origin`` names it in errors."""
    if not isinstance(data, dict):
        raise ProfileError(f"{origin}: a profile must be a JSON object, got {_show(data)}")
    if problems := profile_problems(data):
        raise _error(origin, problems[0])
    present = {k: float(v) if isinstance(_CHECKS[k], _Range) else v for k, v in data.items() if v is not None}
    return HardwareProfile(**{"name": Path(origin).stem, "bandwidth": None, **present})


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
