"""The sim runner's choice: a catalogue shape (or a loadable model's shape, no weights read) on a
hardware cost profile with the options' overrides applied."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, replace

from radixflow.costmodel.hardware.profile_checks import ProfileError
from radixflow.costmodel.hardware.profile_files import resolve_hardware
from radixflow.costmodel.hardware.profiles import SCHEDULER_MODES, HardwareProfile
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.shape.sim_catalogue import DEFAULT_SIM_MODEL
from radixflow.engine.runner import Runner
from radixflow.options.choice import Capacity, EntryBytes
from radixflow.options.engine_options import EngineOptions
from radixflow.options.sim_shape import sim_shape
from radixflow.problems import Problem, ProblemError
from radixflow.scheduler.config import SchedulerConfig


class SimChoice:
    name = "sim"
    checkpoint = None

    def __init__(self, options: EngineOptions) -> None:
        self.label = options.model or DEFAULT_SIM_MODEL
        # a catalogue shape, or the shape of a model the torch runner loads (no weights read)
        self.spec, self.hardware = sim_shape(self.label), sim_hardware(options)

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def has_recurrent(self) -> bool:
        return self.spec.has_recurrent

    def capacity(self, prompt_lengths: Sequence[int] | None, block_size: int) -> Capacity:
        default = SchedulerConfig()
        return Capacity(default.num_blocks, default.num_state_slots)

    def memory_problem(self, scheduler: SchedulerConfig) -> Problem | None:
        return None  # no tensors: the bookkeeping was checked with the options

    def entry_bytes(self, block_size: int) -> EntryBytes:
        # what `SimRunner` reports in its `ModelInfo`: the cost model's shapes
        kv = self.spec.cache_bytes_per_token(self.hardware.weight_bytes)
        return EntryBytes(kv * block_size, self.spec.state_bytes() if self.has_recurrent else 0)

    def build(self, scheduler: SchedulerConfig) -> Runner:
        from radixflow.runners.sim import SimRunner

        return SimRunner(self.spec, self.hardware)

    def describe(self, runner: Runner) -> dict[str, object]:
        model = round_cost_model(self.spec, self.hardware)  # the GPUs the shape is costed on
        # fits: false where not even that many hold it (`cost --json`'s "fits", bench's warning)
        fits = model.breakdown(()).fits
        return {"hardware": asdict(self.hardware), "tensor_parallel": model.tp, "fits": fits}

    @property
    def fixed_cost_ms(self) -> float | None:
        """The fixed cost of a worker call with prefill (what `fixed_cost_ms` sets)."""
        hw = self.hardware
        return (hw.round_overhead_s + hw.layer_overhead_s * self.spec.decoder_layers) * 1e3


def sim_hardware(options: EngineOptions) -> HardwareProfile:
    """The sim's cost profile: ``hardware`` with the fixed-cost and rate overrides applied."""
    try:
        hw = resolve_hardware(options.hardware)
    except ProfileError as e:
        raise ProblemError(Problem("hardware", str(e))) from None
    overrides = [
        ("fixed_cost_ms", lambda h, ms: h.with_fixed_round_cost(ms / 1e3)),
        ("decode_fixed_cost_ms", lambda h, ms: replace(h, decode_overhead_s=ms / 1e3)),
        ("per_request_ms", lambda h, ms: replace(h, per_request_s=ms / 1e3)),
        ("request_overhead_ms", lambda h, ms: replace(h, request_overhead_s=ms / 1e3)),
        ("scheduler_time", lambda h, mode: replace(h, scheduler_overlap=SCHEDULER_MODES[mode])),
        ("tflops", lambda h, x: replace(h, flops=x * 1e12)),
    ]
    for name, apply in overrides:
        value = getattr(options, name)
        if value is None:
            continue
        try:  # the options' ranges lie inside the profile's: this is a safety net
            hw = apply(hw, value)
        except ProfileError as e:
            raise ProblemError(Problem(name, str(e))) from None
        if name in OVERRIDE_SOURCES:
            why = f"set by {name} = {value:.10g}, not the profile's figure"
            hw = _sourced(hw, OVERRIDE_SOURCES[name], why)
    return hw


# option -> the profile figure it sets, whose source then names the option (the profile's source
# describes the figure the option replaced: `cost` said "central 3 ms" beside a set 7 ms)
OVERRIDE_SOURCES = {
    "fixed_cost_ms": "round_overhead_s",
    "decode_fixed_cost_ms": "decode_overhead_s",
    "per_request_ms": "per_request_s",
    "request_overhead_ms": "request_overhead_s",
    "tflops": "flops",
}


def _sourced(hw: HardwareProfile, key: str, why: str) -> HardwareProfile:
    return replace(hw, sources={**hw.sources, key: why})
