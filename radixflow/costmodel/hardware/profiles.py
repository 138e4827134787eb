"""Hardware profiles: the coefficients of the cost model, built in (with sources) or read from a file.

A profile says what one worker call costs: fixed parts (per call, different for calls with prefill
and decode-only calls; per decoder layer; per scheduled sequence; the scheduler's own CPU time,
overlapped with the worker call or in series) plus the work. The work is costed one of two ways
(`radixflow.costmodel.round_cost.by_profile.round_cost_model`): a profile that names ``kernels``
(the H100/H200 profiles) sums the time of every kernel the round runs, each from a `KernelTimes`;
one that does not (the CPU profile, profiles fitted by `radixflow calibrate`) takes the larger of compute time
(FLOPs of each cost term at that term's fitted rate) and memory time (bytes at the bandwidth). A
request's own cost (tokenization, API) is added to its latency, never to a round.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from radixflow.costmodel.hardware.gpu_figures import (
    DECODE_FIXED_S,
    DENSE_BF16_FLOPS,
    PREFILL_FIXED_S,
    REQUEST_OVERHEAD_S,
    SCHEDULER_CHUNK_S,
    SCHEDULER_ROUND_S,
    SRC_DECODE_FIXED,
    SRC_FLOPS,
    SRC_H100_MEM,
    SRC_H200_MEM,
    SRC_KERNELS,
    SRC_PER_SEQUENCE,
    SRC_PREFILL_FIXED,
    SRC_REQUEST,
    SRC_SCHEDULER,
)
from radixflow.costmodel.kernel_times.sources import FIXED_FIGURES, KERNEL_SOURCES, READS_PROFILE_FLOPS
from radixflow.files import write_whole
from radixflow.problems import Problem

# Cost terms whose FLOPs are timed (see costmodel.round_cost.fitted_rates.round_work).
COMPUTE_TERMS = ("matmul", "attention", "prefix_attention", "gdn", "mamba2", "conv", "lm_head")
# A term split off another: a profile written before the split prices it at the other's scale, so
# its rounds cost what they did (attention over a chunk's cached prefix was part of "attention").
SPLIT_FROM = {"prefix_attention": "attention"}

SCHEDULER_MODES = {"overlap": True, "serial": False}  # option value -> HardwareProfile.scheduler_overlap


# Bounds on a profile's figures. Inside them every time the sim computes stays finite (the largest
# sim model does ~1e16 FLOP per round; at the slowest rate and largest scale that is ~1e16 s, far
# from float overflow), and outside them a figure is a unit mistake, not hardware.
MIN_RATE = 1e6  # FLOP/s and B/s: a 1980s microprocessor; the built-in CPU profile has 1e11 FLOP/s
MAX_FLOPS = 1e18  # 1 EFLOP/s: about 1000x the H100/H200's 989 TFLOP/s dense BF16
MAX_BANDWIDTH = 1e15  # 1 PB/s: about 200x the H200's 4.8 TB/s HBM3e
MAX_OVERHEAD_S = 3600.0  # a fixed cost (per call, layer, sequence or request) of one hour; real ones ~1 ms
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
    round_overhead_s: float  # fixed cost of one worker call (with prefill, where decode_overhead_s is set)
    per_request_s: float  # per scheduled chunk (metadata, launches per sequence)
    layer_overhead_s: float = 0.0  # fixed cost per decoder layer per worker call (a fitted CPU figure)
    # seconds per squared token count of a worker call (a fitted CPU figure): a round's per-token
    # cost grows with its size once its activations outgrow a core's cache
    token_pair_s: float = 0.0
    # seconds per cached KV element (K or V value, every attention layer) a chunk reads (a fitted
    # CPU figure): gathering a prefix's KV from the paged pool costs per cached token
    prefix_kv_s: float = 0.0
    kind_scale: dict[str, float] = field(default_factory=dict)  # term -> cost per FLOP vs 1/flops
    weight_bytes: int = 2  # bytes per weight and per KV element
    memory_bytes: float | None = None  # device memory, for the record
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it comes from
    calibration: dict[str, Any] | None = None  # how a fitted profile was measured and how well it fits
    decode_overhead_s: float | None = None  # fixed cost of a decode-only worker call (None: round_overhead_s)
    request_overhead_s: float = 0.0  # each request's own cost (tokenize, API): in its latency, in no round
    scheduler_round_s: float = 0.0  # the scheduler's CPU time per round (modelled, not timed)
    scheduler_chunk_s: float = 0.0  # ... and per prefill chunk it schedules
    scheduler_overlap: bool = True  # hidden behind the worker call (async scheduling) or in series
    kernels: str | None = None  # kernel-time source of the work (None: fitted per-term rates)

    def __post_init__(self) -> None:
        """Every profile, however made (file, fit, `replace`), is one the sim can use."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if problems := profile_problems(values):
            raise _error(f"hardware profile {self.name!r}", problems[0])

    def seconds_per_flop(self, term: str) -> float:
        scale = self.kind_scale.get(term)
        if scale is None and term in SPLIT_FROM:
            scale = self.kind_scale.get(SPLIT_FROM[term])
        return (1.0 if scale is None else scale) / self.flops

    @property
    def prices_by_flops(self) -> bool:
        """Whether ``flops`` prices any work: fitted rates and roofline kernels read it, measured
        kernels (h100, h200) time their GPU's own and do not."""
        return self.kernels is None or self.kernels in READS_PROFILE_FLOPS

    def fixed_call_s(self, decode_only: bool) -> float:
        """The fixed cost of one worker call, layers apart."""
        if decode_only and self.decode_overhead_s is not None:
            return self.decode_overhead_s
        return self.round_overhead_s

    def with_fixed_round_cost(self, seconds: float) -> HardwareProfile:
        """The same hardware with the whole fixed cost of a worker call with prefill set to
        ``seconds`` (the per-layer part dropped; a decode-only call keeps its own figure, if any)."""
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
        # the bounds first: an int too large for a float makes math.isfinite raise OverflowError
        if number is not None and self.low <= number <= self.high and math.isfinite(number):
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


def _bool(key: str, value: object) -> Problem | None:
    ok = isinstance(value, bool)
    return None if ok else Problem(key, f"must be true or false, got {_show(value)}")


def _kernels(key: str, value: object) -> Problem | None:
    if isinstance(value, str) and value in KERNEL_SOURCES:
        return None
    known = ", ".join(sorted(KERNEL_SOURCES))
    return Problem(key, f"must be one of {known}, or null, got {_show(value)}")


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
    "token_pair_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "prefix_kv_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "kind_scale": _kind_scale,
    "weight_bytes": _weight_bytes,
    "memory_bytes": _Range(1.0, MAX_MEMORY_BYTES, "bytes", optional=True),
    "sources": _sources,
    "calibration": _calibration,
    "decode_overhead_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "request_overhead_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_round_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_chunk_s": _Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_overlap": _bool,
    "kernels": _kernels,
}
_REQUIRED = ("flops", "round_overhead_s", "per_request_s")
# The keys of a file in the torch runner's store of fitted round profiles (`runners.profile_store`)
STORED_KEYS = {"model", "machine", "profile"}
# Keys whose default is a value, not an absence: null here is a mistake, never "use the default"
# (a null kind_scale read as {} would set every term's scale to 1.0 without a word).
_NOT_NULL = ("name", "kind_scale", "weight_bytes", "sources", "scheduler_overlap")


def profile_problems(data: dict[str, Any]) -> list[Problem]:
    """Why ``data`` (profile key -> value, as in a profile file) is not a usable profile: unknown
    keys, missing ones, wrong types (no coercion: ``"1e12"`` is not a number) and out-of-range
    values. Null stands for an optional key's absence; a key with a default value may be left
    out but not null. Pure."""
    problems = [Problem(k, "is not a profile key") for k in data if k not in _CHECKS]
    for key, check in _CHECKS.items():
        value = data.get(key)
        if value is None and key in data and key in _NOT_NULL:
            problems.append(Problem(key, "must not be null (leave the key out for its default)"))
        elif value is None and key in _REQUIRED:
            problems.append(Problem(key, f"missing (must be {check.describe()})"))  # type: ignore[attr-defined]
        elif value is not None and (problem := check(key, value)) is not None:
            problems.append(problem)
    return problems


def _gpu(name: str, bandwidth: float, memory_gb: float, mem_source: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        flops=DENSE_BF16_FLOPS,
        bandwidth=bandwidth,
        round_overhead_s=PREFILL_FIXED_S,
        per_request_s=0.0,
        weight_bytes=2,
        memory_bytes=memory_gb * 1e9,
        sources={
            "flops": SRC_FLOPS,
            "bandwidth": mem_source,
            "memory_bytes": mem_source,
            "round_overhead_s": SRC_PREFILL_FIXED,
            "decode_overhead_s": SRC_DECODE_FIXED,
            "request_overhead_s": SRC_REQUEST,
            "scheduler": SRC_SCHEDULER,
            "per_request_s": SRC_PER_SEQUENCE,
            "kernels": SRC_KERNELS,
        },
        decode_overhead_s=DECODE_FIXED_S,
        request_overhead_s=REQUEST_OVERHEAD_S,
        scheduler_round_s=SCHEDULER_ROUND_S,
        scheduler_chunk_s=SCHEDULER_CHUNK_S,
        kernels=f"measured-{name}",
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
    if set(data) == STORED_KEYS:  # what calibrate says it stored, given where a profile goes
        raise ProfileError(
            f"{origin}: a round profile of the torch runner's store (a model's own fit under 'profile', "
            "with the model and machine it was timed on), not a hardware profile: give the file "
            "`radixflow calibrate` wrote to --out"
        )
    if problems := profile_problems(data) or _unread_figures(data):
        raise _error(origin, problems[0])
    present = {k: float(v) if isinstance(_CHECKS[k], _Range) else v for k, v in data.items() if v is not None}
    return HardwareProfile(**{"name": Path(origin).stem, "bandwidth": None, **present})


def _unread_figures(data: dict[str, Any]) -> list[Problem]:
    """Figures a file states that its kernel source ignores (a measured GPU times its own
    kernels: an H100 PCIe written as ``measured-h100`` with 2 TB/s was priced at the SXM's 3.35)."""
    kernels = data.get("kernels")
    fixed = FIXED_FIGURES.get(kernels, {}) if isinstance(kernels, str) else {}
    return [
        Problem(
            key,
            f"is {data[key]:g} {_unit(key)}, but kernels {kernels!r} time that GPU's own kernels at "
            f"{own:g} {_unit(key)}, whatever the profile says: leave the key out, or use kernels "
            "'roofline' for other figures",
        )
        for key, own in fixed.items()
        if data.get(key) is not None and not math.isclose(data[key], own, rel_tol=1e-9)
    ]


def _unit(key: str) -> str:
    check = _CHECKS[key]
    return check.unit if isinstance(check, _Range) else ""


def load_profile(path: str | Path) -> HardwareProfile:
    """Read a profile JSON file (as written by `radixflow calibrate`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ProfileError(f"cannot read hardware profile {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an int of over 4300 digits
        raise ProfileError(f"hardware profile {path} is not valid JSON: {e}") from None
    return profile_from_dict(data, str(path))


def save_profile(profile: HardwareProfile, path: str | Path) -> None:
    write_whole(path, json.dumps(profile.to_dict(), indent=2) + "\n")


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
