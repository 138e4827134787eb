"""Keys of an experiment config that cannot change the cells they set: one warning line each.

`radixflow bench` warns about a given flag that cannot change its run (`radixflow.options.flags`);
a config key is the same slip (a setting of the other runner, a rate without arrivals spread in
time), but it reaches many cells, so it is warned about only when it changes none of them: a rate
beside a sweep of arrivals ``batch`` and ``poisson`` changes the poisson cells and stays quiet.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import Any

from radixflow.options import EngineOptions
from radixflow.options.flag_warnings import (
    ONE_TOKEN,
    RECURRENT_ONLY,
    SIM_ONLY,
    SLOTS_ONLY,
    TORCH_ONLY,
    clock_warnings,
    dtype_warnings,
    unmodelled_scheduler,
    unread_flops,
)


def ineffective(
    settings: dict[str, Any], workload: dict[str, Any], has_recurrent: bool, replaced: dict[str, str]
) -> dict[str, str]:
    """Cell keys (``workload.<key>`` for the workload's) that cannot change this cell, each with
    why; ``has_recurrent``: whether the cell's model has recurrent state; ``replaced``: keys that
    something else sets for every cell (`replaced`), with why."""
    sim = settings["runner"] == "sim"
    groups = workload.get("groups")  # None: a workload given without (a caller's part of one)
    unread, no_scheduler = profile_notes(settings["hardware"]) if sim else (None, None)
    rules = (
        (SIM_ONLY, settings["runner"] == "torch", "with the torch runner (it sets the sim cost model)"),
        ((*TORCH_ONLY, "cost_profile"), settings["runner"] == "sim", "with the sim runner"),
        (
            RECURRENT_ONLY,
            not has_recurrent,
            "on a full-attention model: it has no recurrent state",
        ),
        (
            SLOTS_ONLY,
            has_recurrent and settings["state_slots"] == 0 and settings["capacity"] is None,
            "with state_slots = 0: no checkpoint is kept",
        ),
        (("decode_fixed_cost_ms",), sim, f"on the sim runner: {ONE_TOKEN}"),
        (("router",), settings["replicas"] == 1, "with one replica (replicas = 1)"),
        (("tflops",), unread is not None, unread or ""),
        (("scheduler_time",), no_scheduler is not None, no_scheduler or ""),
        (("workload.rate",), workload["arrival"] == "batch", "with arrival batch (all arrive at t=0)"),
        (("workload.burst_size",), workload["arrival"] != "bursty", "without arrival bursty"),
        (
            ("workload.skew", "workload.namespaces"),
            groups is not None and groups <= 1,
            f"with {'one group' if groups else 'no groups'} (groups = {groups})",
        ),
        (("repetitions",), settings["replicas"] > 1, "on a fleet (replicas > 1): it runs once"),
        (
            ("kv_blocks", "state_slots", "cache_memory"),
            settings["capacity"] is not None,
            "with capacity (the cache is capped at its share of the working set)",
        ),
    )
    idle = {key: why for keys, applies, why in rules if applies for key in keys}
    return idle | replaced


def profile_notes(hardware: str) -> tuple[str | None, str | None]:
    """`unread_flops` and `unmodelled_scheduler` of the profile ``hardware`` names, read once per
    version of its file (a profile is checked whole as it is read: every cell of a grid on one
    profile file read it again, seconds over a few hundred cells)."""
    try:
        stat = os.stat(hardware)
        version = (stat.st_size, stat.st_mtime_ns)
    except (OSError, ValueError):  # a built-in name, or no file: read as it is
        version = None
    return _profile_notes(hardware, version)


@functools.lru_cache(maxsize=64)
def _profile_notes(hardware: str, version: tuple[int, int] | None) -> tuple[str | None, str | None]:
    return unread_flops(hardware), unmodelled_scheduler(hardware)


def replaced(named: Iterable[str], device: str | None) -> dict[str, str]:
    """Keys set for every cell by something else: ``named``, the parts (placement, eviction,
    admission) every policy variant names for itself; ``device``, `--device` (None: not given)."""
    out = {key: f"with every policy in `policies` naming its own {key}" for key in named}
    return out | ({} if device is None else {"device": "with --device (it replaces every torch cell's)"})


def clock_notes(options: list[EngineOptions], origin: str) -> tuple[str, ...]:
    """The clock and dtype warnings `radixflow bench` gives (`clock_warnings`, `dtype_warnings`)
    for the cells' options, once each: a torch cell timed on the CPU clock with threads that spin,
    or computing below float32 (its outputs then not exactly a no-cache run's)."""
    each = (clock_warnings(o, "torch_threads = 1") + dtype_warnings(o, 'dtype = "float32"') for o in options)
    notes = dict.fromkeys(note for warnings in each for note in warnings)
    return tuple(f"{origin}: {note}" for note in notes)


class Unused:
    """Per config key given (``defaults.device``, ``grid[1].workload.rate``): the cells it reaches
    and why it could not change them, for a warning when it changed none."""

    def __init__(self) -> None:
        self.reached: dict[str, int] = {}
        self.idle: dict[str, tuple[int, str]] = {}

    def note(self, given: dict[str, str], idle: dict[str, str]) -> None:
        """One cell: ``given`` maps its keys that the config set to the config key that set them;
        ``idle``: its keys that cannot change it, with why (`ineffective`)."""
        for key, where in given.items():
            self.reached[where] = self.reached.get(where, 0) + 1
            if key in idle:
                count, _ = self.idle.get(where, (0, idle[key]))
                self.idle[where] = (count + 1, idle[key])

    def warnings(self, origin: str) -> tuple[str, ...]:
        return tuple(
            f"{origin}: {where} has no effect {why}"
            for where, (count, why) in self.idle.items()
            if count == self.reached[where]
        )
