"""`SimOptions`: the engine options of the sim runner's cost model (the hardware profile and its
fixed-cost, scheduler-time and rate overrides), the ``sim`` group of every door's flags;
`EngineOptions` holds them with the rest. `hardware_problem`: a profile refused on either runner."""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.costmodel.hardware.profile_checks import MAX_FLOPS, MAX_OVERHEAD_S, ProfileError
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.hardware.profiles import SCHEDULER_MODES
from radixflow.options.spec import option
from radixflow.problems import Problem
from radixflow.user_paths import stdin_problem

MAX_COST_MS = MAX_OVERHEAD_S * 1e3  # what a hardware profile may hold, in ms
TFLOPS_RANGE = (1e-3, MAX_FLOPS / 1e12)  # 1 GFLOP/s (a slow CPU) up to the profiles' limit


@dataclass(frozen=True)
class SimOptions:
    hardware: str = option(
        "h100",
        "sim cost profile: h100, h200, cpu or a profile file written by `radixflow calibrate`",
        str,
        group="sim",
        metavar="NAME|FILE",
    )
    fixed_cost_ms: float | None = option(
        None,
        f"sim: the whole fixed cost of a worker call with prefill in ms (replaces the profile's "
        f"per-call and per-layer parts; h100/h200: 3, band 1-10), at most {MAX_COST_MS:.0f} "
        "(default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
        aliases=("--round-overhead-ms",),
    )
    decode_fixed_cost_ms: float | None = option(
        None,
        f"sim: the fixed cost of a decode-only worker call in ms (h100/h200: 0.4), at most "
        f"{MAX_COST_MS:.0f} (default: the profile's; a profile without one charges --fixed-cost-ms); "
        "`cost --decode` prices one, a bench or experiment run makes none (its requests generate "
        "one token each)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    request_overhead_ms: float | None = option(
        None,
        f"sim: each request's own cost in ms (tokenization, API; h100/h200: 2): it is admitted that "
        f"long after it arrives, so the cost is in its latency and in no round; at most "
        f"{MAX_COST_MS:.0f} (default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    scheduler_time: str | None = option(
        None,
        "sim: the scheduler's modelled CPU time per round overlaps the worker call (overlap: vLLM "
        "V1's async scheduling; only what is longer than the call shows) or adds to it (serial) "
        "(default: the profile's; h100/h200: overlap)",
        str,
        choices=lambda: list(SCHEDULER_MODES),
        group="sim",
    )
    per_request_ms: float | None = option(
        None,
        f"sim: cost per scheduled chunk in ms, at most {MAX_COST_MS:.0f} (default: the profile's)",
        float,
        low=0.0,
        high=MAX_COST_MS,
        group="sim",
        metavar="MS",
    )
    tflops: float | None = option(
        None,
        f"sim: the profile's TFLOP/s (a roofline profile: the peak its kernels run at a stated "
        f"fraction of; h100/h200 time measured kernels and ignore it), {TFLOPS_RANGE[0]:g} to "
        f"{TFLOPS_RANGE[1]:g} (default: the profile's)",
        float,
        low=TFLOPS_RANGE[0],
        high=TFLOPS_RANGE[1],
        group="sim",
        metavar="X",
    )


def hardware_problem(name: str) -> Problem | None:
    """Why ``name`` is no cost profile (a built-in name or a readable profile file), on either
    runner: a value is refused at every door or at none. Reads the file; not one named ``-``,
    which would read as standard input (`stdin_problem`)."""
    if (why := stdin_problem(name)) is not None:
        return Problem("hardware", why)
    try:
        resolve_hardware(name)
    except ProfileError as e:
        return Problem("hardware", str(e))
    return None
