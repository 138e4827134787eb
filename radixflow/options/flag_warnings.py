"""Warnings for engine options that cannot change a run, or that make it inexact: given for a
runner, profile or model that does not read them (`ineffective`, `ineffective_for_model`), a CPU
clock counting spinning threads, a dtype below float32. One line each, every door spelling the
option its own way (``spell``: a flag, an `LLM` keyword, a TOML key)."""

from __future__ import annotations

from collections.abc import Callable

from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.engine.clocks import spin_warning
from radixflow.options.engine_options import EngineOptions, option_fields, spec_of
from radixflow.options.machine import cpu_count
from radixflow.options.runners import runner_name
from radixflow.problems import flag

SIM_ONLY = tuple(f.name for f in option_fields() if spec_of(f).group == "sim")
# read only where there is recurrent state (admission: which checkpoint saves may evict)
RECURRENT_ONLY = ("placement", "state_slots", "admission")
# read only where a checkpoint can be saved: which positions, and which saves may evict others
SLOTS_ONLY = ("placement", "admission")
TORCH_ONLY = ("device", "dtype", "torch_threads", "matmul", "kernels", "clock")
# why a decode-only call's fixed cost never counts in a bench run or an experiment cell on the sim
# runner: their requests generate one token, sampled at the prefill's end (`cost --decode` prices one)
ONE_TOKEN = "its requests generate one token each, so no worker call is decode-only"
Spell = Callable[[str], str]  # an option's name as a door writes it (``flag``: --kv-blocks)


def ineffective(options: EngineOptions, given_names: list[str], spell: Spell = flag) -> list[str]:
    """Warnings for given options that cannot change a run on this runner (one line each; each
    option as ``spell`` names it: its flag, or its keyword for `LLM(...)`)."""
    out, runner = [], runner_name(options)
    if runner == "torch" and (names := [n for n in SIM_ONLY if n in given_names]):
        sets = "it sets" if len(names) == 1 else "they set"
        out.append(f"{_listed(names, spell)} no effect with the torch runner ({sets} the sim cost model)")
    if runner == "sim" and (names := [n for n in TORCH_ONLY if n in given_names]):
        out.append(f"{_listed(names, spell)} no effect with the sim runner")
    if runner == "sim" and "tflops" in given_names and (why := unread_flops(options.hardware)):
        out.append(f"{spell('tflops')} has no effect {why}")
    if (
        runner == "sim"
        and "scheduler_time" in given_names
        and (why := unmodelled_scheduler(options.hardware))
    ):
        out.append(f"{spell('scheduler_time')} has no effect {why}")
    return out


def unread_flops(hardware: str) -> str | None:
    """Why the profile ``hardware`` names prices nothing at its ``flops`` (the figure ``tflops``
    sets), or None where it does (or cannot be read: that is an error when it is used)."""
    try:
        profile = resolve_hardware(hardware)
    except ProfileError:
        return None
    if profile.prices_by_flops:
        return None
    return f"with hardware {hardware!r}: its kernel times are measured, none priced at its FLOP/s"


def unmodelled_scheduler(hardware: str) -> str | None:
    """Why the profile ``hardware`` names has no scheduler time for ``scheduler_time`` to overlap
    or add (the cpu profile, calibrate's fitted ones), or None where it has some (or cannot be
    read: that is an error when it is used)."""
    try:
        profile = resolve_hardware(hardware)
    except ProfileError:
        return None
    if profile.scheduler_round_s or profile.scheduler_chunk_s:
        return None
    return f"with hardware {hardware!r}: it models no scheduler time to overlap or add"


def clock_warnings(options: EngineOptions, one_thread: str = "--torch-threads 1") -> list[str]:
    """A warning where the torch runner's CPU clock would not read a round's work: off a CPU (the
    host thread's time leaves out the device's work it waits for), or counting threads spinning
    (`spin_warning`; threads not given: torch's default, one per CPU, `set_torch_threads`).
    ``one_thread``: one thread, as the door spells it."""
    if runner_name(options) != "torch" or options.clock != "cpu":
        return []
    if options.device.split(":")[0] != "cpu":
        return [
            f"clock cpu on device {options.device} reads the host thread's CPU time, which leaves "
            "out the device's work a round waits for: use the wall clock there"
        ]
    message = spin_warning(options.clock, options.torch_threads or cpu_count(), one_thread)
    return [] if message is None else [message]


def dtype_warnings(options: EngineOptions, exact: str = "--dtype float32") -> list[str]:
    """A warning where the torch runner computes below float32 (bfloat16 or float16, given or
    ``auto`` off a CPU): rounding then depends on how a round batches and chunks its rows, so cached
    and batched runs no longer reproduce a no-cache run exactly. ``exact``: float32, as the door spells it."""
    on_cpu = options.device.split(":")[0] == "cpu"
    low = options.dtype in ("bfloat16", "float16") or (options.dtype == "auto" and not on_cpu)
    if runner_name(options) != "torch" or not low:
        return []
    return [
        f"dtype {options.dtype} (below float32): outputs are not exactly a no-cache run's "
        f"(logprobs move by tenths, and a greedy token may differ); use {exact} for exact outputs"
    ]


def ineffective_for_model(
    given_names: list[str], has_recurrent: bool, spell: Spell = flag, state_slots: int | None = None
) -> list[str]:
    """Warnings for given options that cannot change a run on this model (one line each);
    ``state_slots``: the option's value (0: no checkpoint is ever saved, so where they go and
    which may evict others cannot matter)."""
    if not has_recurrent and (names := [n for n in RECURRENT_ONLY if n in given_names]):
        return [f"{_listed(names, spell)} no effect on a full-attention model: it has no recurrent state"]
    if has_recurrent and state_slots == 0 and (names := [n for n in SLOTS_ONLY if n in given_names]):
        return [f"{_listed(names, spell)} no effect with {spell('state_slots')} 0: no checkpoint is kept"]
    return []


def _listed(names: list[str], spell: Spell) -> str:
    return f"{', '.join(spell(n) for n in names)} {'has' if len(names) == 1 else 'have'}"
