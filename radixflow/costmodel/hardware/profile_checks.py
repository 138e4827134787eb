"""What makes a hardware profile usable: each key's check (`profile_problems`: known keys, types
with no coercion, bounds that keep every time the sim computes finite), the figures a measured
kernel source ignores (`unread_figures`), and `ProfileError`, the one-line refusal naming the key."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from radixflow.costmodel.kernel_times.sources import FIXED_FIGURES, KERNEL_SOURCES
from radixflow.problems import Problem

# Cost terms whose FLOPs are timed (see costmodel.round_cost.fitted_rates.round_work).
COMPUTE_TERMS = ("matmul", "attention", "prefix_attention", "gdn", "mamba2", "conv", "lm_head")

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
# 100 MB: a GPU has gigabytes. Below it the figure is in GB or MB, not bytes (80 for an H100 ran
# every model tensor-parallel on 64 GPUs, and it still did not fit; a roofline profile reads it)
MIN_MEMORY_BYTES = 1e8


class ProfileError(ValueError):
    """A hardware profile that cannot be used (one line, naming the key and the value).

    ``problem``: the same as data, its ``param`` the profile key (None when no single key is at fault).
    """

    def __init__(self, message: str, problem: Problem | None = None) -> None:
        super().__init__(message)
        self.problem = problem if problem is not None else Problem(None, message)


@dataclass(frozen=True)
class Range:
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
        return Problem(key, f"must be {self.describe()}, got {show(value)}")

    def describe(self) -> str:
        null = ", or null" if self.optional else ""
        return f"a number from {self.low:g} to {self.high:g} ({self.unit}){null}"


class Written(float):
    """A number a file wrote past what a float holds (``1e400``), kept as written so a refusal
    quotes it (JSON's writer says "Infinity", a word the file never held). The checks refuse it."""

    text: str

    def __new__(cls, value: float, text: str) -> Written:
        made = super().__new__(cls, value)
        made.text = text
        return made


def as_written(text: str) -> float:
    """A JSON number's ``parse_float``: the float, or `Written` where it is past any float."""
    value = float(text)
    return value if math.isfinite(value) else Written(value, text)


def show(value: object) -> str:
    if isinstance(value, Written):
        return value.text
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _name(key: str, value: object) -> Problem | None:
    ok = isinstance(value, str) and value
    return None if ok else Problem(key, f"must be a non-empty string, got {show(value)}")


def _weight_bytes(key: str, value: object) -> Problem | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_WEIGHT_BYTES
    return None if ok else Problem(key, f"must be an integer from 1 to {MAX_WEIGHT_BYTES}, got {show(value)}")


def _kind_scale(key: str, value: object) -> Problem | None:
    """Known cost terms to scales (0 is a term a fit found free)."""
    if not isinstance(value, dict):
        return Problem(key, f"must be a JSON object of cost terms to numbers, got {show(value)}")
    scale = Range(0.0, MAX_KIND_SCALE, "times the flops rate's cost")
    for term, v in value.items():
        if term not in COMPUTE_TERMS:
            return Problem(key, f"unknown term {term!r} (terms: {', '.join(COMPUTE_TERMS)})")
        if problem := scale(term, v):
            return Problem(key, f"entry {problem}")
    return None


def _sources(key: str, value: object) -> Problem | None:
    if not isinstance(value, dict):
        return Problem(key, f"must be a JSON object of figures to strings, got {show(value)}")
    bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
    return None if bad is None else Problem(key, f"entry {bad!r} must be a string, got {show(value[bad])}")


def _bool(key: str, value: object) -> Problem | None:
    ok = isinstance(value, bool)
    return None if ok else Problem(key, f"must be true or false, got {show(value)}")


def _kernels(key: str, value: object) -> Problem | None:
    if isinstance(value, str) and value in KERNEL_SOURCES:
        return None
    known = ", ".join(sorted(KERNEL_SOURCES))
    return Problem(key, f"must be one of {known}, or null, got {show(value)}")


def _calibration(key: str, value: object) -> Problem | None:
    ok = isinstance(value, dict)
    return None if ok else Problem(key, f"must be a JSON object or null, got {show(value)}")


# Each profile key's check. A key absent here is not a profile key.
CHECKS: dict[str, Callable[[str, object], Problem | None]] = {
    "name": _name,
    "flops": Range(MIN_RATE, MAX_FLOPS, "FLOP/s"),
    "bandwidth": Range(MIN_RATE, MAX_BANDWIDTH, "B/s", optional=True),
    "round_overhead_s": Range(0.0, MAX_OVERHEAD_S, "s"),
    "per_request_s": Range(0.0, MAX_OVERHEAD_S, "s"),
    "layer_overhead_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "token_pair_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "prefix_kv_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "kind_scale": _kind_scale,
    "weight_bytes": _weight_bytes,
    "memory_bytes": Range(MIN_MEMORY_BYTES, MAX_MEMORY_BYTES, "bytes", optional=True),
    "sources": _sources,
    "calibration": _calibration,
    "decode_overhead_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "request_overhead_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_round_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_chunk_s": Range(0.0, MAX_OVERHEAD_S, "s", optional=True),
    "scheduler_overlap": _bool,
    "kernels": _kernels,
}
_REQUIRED = ("flops", "round_overhead_s", "per_request_s")
# ``kernels`` checked first: what else a file must state hangs on it (a measured GPU fixes its own
# figures), so a typo there ("measured-H100") is named, not the figure it would have filled in
_ORDER = ("kernels", *(k for k in CHECKS if k != "kernels"))
# Keys whose default is a value, not an absence: null here is a mistake, never "use the default"
# (a null kind_scale read as {} would set every term's scale to 1.0 without a word).
_NOT_NULL = ("name", "kind_scale", "weight_bytes", "sources", "scheduler_overlap")


def profile_problems(data: dict[str, Any]) -> list[Problem]:
    """Why ``data`` (profile key -> value, as in a profile file) is not a usable profile: unknown
    keys, missing ones, wrong types (no coercion: ``"1e12"`` is not a number) and out-of-range
    values. Null stands for an optional key's absence; a key with a default value may be left
    out but not null. Pure."""
    problems = [Problem(k, "is not a profile key") for k in data if k not in CHECKS]
    for key in _ORDER:
        check, value = CHECKS[key], data.get(key)
        if value is None and key in data and key in _NOT_NULL:
            problems.append(Problem(key, "must not be null (leave the key out for its default)"))
        elif value is None and key in _REQUIRED:
            problems.append(Problem(key, f"missing (must be {check.describe()})"))  # type: ignore[attr-defined]
        elif value is not None and (problem := check(key, value)) is not None:
            problems.append(problem)
    return problems


def profile_error(origin: str, problem: Problem) -> ProfileError:
    if problem.param is None:
        return ProfileError(f"{origin}: {problem.message}", problem)
    return ProfileError(f"{origin}: profile key {problem.param!r} {problem.message}", problem)


# Figures only fitted per-term rates read (`round_cost.fitted_rates.CostModel`), at the value that
# is no figure: a profile naming a kernel source times every kernel by it and reads neither
FITTED_ONLY: dict[str, object] = {"kind_scale": {}, "prefix_kv_s": 0.0}


def unread_figures(data: dict[str, Any]) -> list[Problem]:
    """Figures a file states that its kernel source ignores (a measured GPU times its own
    kernels: an H100 PCIe written as ``measured-h100`` with 2 TB/s was priced at the SXM's 3.35;
    any source prices attention whatever ``kind_scale`` says)."""
    kernels = data.get("kernels")
    if not isinstance(kernels, str):
        return []
    return _datasheet_figures(data, kernels) + _fitted_figures(data, kernels)


def with_fixed_figures(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the figures its kernel source fixes (a measured GPU's datasheet) where it
    leaves them out or null: a file naming measured kernels need not state a peak no kernel is
    priced at (refused as missing, then told to leave the key out when stated otherwise)."""
    kernels = data.get("kernels")
    fixed = FIXED_FIGURES.get(kernels, {}) if isinstance(kernels, str) else {}
    return {**fixed, **{k: v for k, v in data.items() if v is not None or k not in fixed}}


def _fitted_figures(data: dict[str, Any], kernels: str) -> list[Problem]:
    return [
        Problem(
            key,
            f"is {show(data[key])}, but kernels {kernels!r} time every kernel themselves and read no "
            f"{key}: leave the key out, or kernels out for fitted per-term rates",
        )
        for key, none in FITTED_ONLY.items()
        if data.get(key) not in (None, none)
    ]


def _datasheet_figures(data: dict[str, Any], kernels: str) -> list[Problem]:
    fixed = FIXED_FIGURES.get(kernels, {})
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
    check = CHECKS[key]
    return check.unit if isinstance(check, Range) else ""
