"""Which runner an engine gets: small classes behind one protocol, chosen by name.

A choice resolves its model before anything is allocated (a zoo model is built on first use), so
the vocabulary, the default capacity and the memory the pools need are known up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from radixflow.costmodel.hardware.profiles import (
    SCHEDULER_MODES,
    HardwareProfile,
    ProfileError,
    resolve_hardware,
)
from radixflow.costmodel.round_cost.by_profile import round_cost_model
from radixflow.costmodel.shape.sim_catalogue import DEFAULT_SIM_MODEL, SIM_MODELS
from radixflow.engine.runner import Runner
from radixflow.options.engine_options import EngineOptions
from radixflow.options.machine import pools_problem
from radixflow.options.sim_shape import sim_name_problem, sim_shape
from radixflow.problems import Problem, ProblemError
from radixflow.runners.footprint import BYTES_PER_ELEMENT
from radixflow.scheduler.config import SchedulerConfig

DEFAULT_TORCH_MODEL = "qwen3_5-small"


@dataclass(frozen=True)
class Capacity:
    kv_blocks: int
    state_slots: int


@dataclass(frozen=True)
class EntryBytes:
    """One KV block (every attention layer, ``block_size`` tokens) and one state slot (every
    recurrent layer's state; 0 for a full-attention model), in bytes."""

    block: int
    slot: int


class RunnerChoice(Protocol):
    name: str
    label: str  # the model as the user named it
    checkpoint: Path | None  # the model's directory (None: a sim shape, no weights)

    @property
    def vocab_size(self) -> int:
        """Vocabulary of the chosen model (workloads draw token ids below it). Pure."""
        ...

    @property
    def has_recurrent(self) -> bool:
        """Whether the model has recurrent layers (a full-attention model needs no state slots). Pure."""
        ...

    def capacity(self, prompt_lengths: Sequence[int] | None, block_size: int) -> Capacity:
        """Default cache capacity for prompts of these lengths (None: a server's open-ended
        stream). Pure."""
        ...

    def memory_problem(self, scheduler: SchedulerConfig) -> Problem | None:
        """Why the runner's pools for this capacity cannot fit this machine (None: they can). Pure."""
        ...

    def entry_bytes(self, block_size: int) -> EntryBytes:
        """What one KV block and one state slot take in the runner's pools. Pure."""
        ...

    def build(self, scheduler: SchedulerConfig) -> Runner:
        """Construct the runner (reads model weights, allocates its pools)."""
        ...

    def describe(self, runner: Runner) -> dict[str, object]:
        """Runner settings to record beside the results: what ``runner`` (built by this choice)
        runs with, an option's ``auto`` resolved."""
        ...

    @property
    def fixed_cost_ms(self) -> float | None:
        """The modelled fixed cost of one worker call in ms (None: a real runner pays what it pays)."""
        ...


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
        tp = round_cost_model(self.spec, self.hardware).tp  # GPUs the shape is costed on
        return {"hardware": asdict(self.hardware), "tensor_parallel": tp}

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
    return hw


class TorchChoice:
    name = "torch"

    def __init__(self, options: EngineOptions) -> None:
        self.label, self.device = options.model or DEFAULT_TORCH_MODEL, options.device
        self.threads, self.seed, self.matmul = options.torch_threads, options.seed, options.matmul
        self.kernels = options.kernels
        self.clock = options.clock
        _check_matmul(options.matmul)
        self.checkpoint: Path = _resolve(self.label, self.device)
        self.dtype = _dtype(options.dtype, self.device)  # after the device is known to exist
        # config, tensor names and shapes checked now (cheap: nothing read), not after allocation
        self.footprint = _guard(lambda: _footprint(self.checkpoint))

    @property
    def vocab_size(self) -> int:
        from radixflow.models.io.loader import read_config

        return int(_guard(lambda: read_config(self.checkpoint)).vocab_size)

    @property
    def has_recurrent(self) -> bool:
        return self.footprint.has_recurrent

    def capacity(self, prompt_lengths: Sequence[int] | None, block_size: int) -> Capacity:
        # Real pools are allocated up front: size them to the workload, not to a GPU.
        if prompt_lengths is None:
            return Capacity(1024, 256)
        need = sum(-(-n // block_size) + 1 for n in prompt_lengths)
        return Capacity(max(need, 64), 256)

    def memory_problem(self, scheduler: SchedulerConfig) -> Problem | None:
        entry = self.entry_bytes(scheduler.block_size)  # in the runner's dtype, not the footprint's float32
        need = entry.block * scheduler.num_blocks + entry.slot * scheduler.num_state_slots
        what = (
            f"{scheduler.num_blocks} KV blocks of {scheduler.block_size} tokens, "
            f"{scheduler.num_state_slots} state slots"
        )
        return pools_problem(need, self.device, what, budgeted=scheduler.cache_memory is not None)

    def entry_bytes(self, block_size: int) -> EntryBytes:
        # the footprint counts float32 elements; KV is kept in the runner's dtype, state in float32
        kv_elements = self.footprint.kv_bytes_per_token // BYTES_PER_ELEMENT
        return EntryBytes(kv_elements * self.dtype.itemsize * block_size, self.footprint.state_bytes_per_slot)

    def build(self, scheduler: SchedulerConfig) -> Runner:
        from radixflow.runners.footprint import set_torch_threads
        from radixflow.runners.torch_runner import TorchRunner

        if self.threads is not None:
            set_torch_threads(self.threads)
        return _guard(
            lambda: TorchRunner(
                self.checkpoint,
                scheduler.block_size,
                scheduler.num_blocks,
                scheduler.num_state_slots,
                device=self.device,
                dtype=self.dtype,
                label=self.label,
                seed=self.seed,
                matmul=self.matmul,
                kernels=self.kernels,
                clock=self.clock,
            )
        )

    def describe(self, runner: Runner) -> dict[str, object]:
        from radixflow.runners.torch_runner import TorchRunner

        assert isinstance(runner, TorchRunner), "describes the runner this choice built"
        return {
            "device": self.device,
            "dtype": str(self.dtype),
            "checkpoint": str(self.checkpoint),
            **runner.resolved(),
            "clock": self.clock,
        }

    @property
    def fixed_cost_ms(self) -> float | None:
        return None


def _check_matmul(spec: str) -> None:
    """A matmul plan the torch runner can follow, refused before any model is built."""
    from radixflow.runners.matmul import parse_plan

    plan = parse_plan(spec)
    if isinstance(plan, Problem):
        raise ProblemError(plan)


def torch_settings_problem(options: EngineOptions, local: bool = True) -> Problem | None:
    """What the torch runner refuses of ``dtype``, ``matmul`` and ``kernels`` on the device, in its
    own words, without building or reading the model (None: nothing, or not the torch runner).
    ``local``: the device is this machine's (checked already), and native kernels asked for are
    built (or found) here as a replica builds them; else the refusals that hold on any machine
    (``auto`` on a GPU is that GPU's dtype: left to the replica)."""
    if runner_name(options) != "torch":
        return None
    try:
        from radixflow.runners.torch_runner import native_problem, settings_problem
    except ImportError:  # an ingress without torch, its replicas elsewhere: they say it
        return None
    if not local and options.dtype == "auto" and options.device.split(":")[0] != "cpu":
        return None
    try:
        dtype = _dtype(options.dtype, options.device)
    except ProblemError as e:
        return e.problem
    problem = settings_problem(options.matmul, options.kernels, options.device, dtype, local)
    if problem is None and local and options.kernels == "native":  # built here as a replica would
        problem = native_problem(options.device, dtype)
    return problem


def resolved_dtype(name: str, device: str) -> Any:
    """The torch dtype of option ``dtype`` on ``device`` (a refused pair raises `ProblemError`)."""
    return _dtype(name, device)


def _dtype(name: str, device: str) -> Any:
    """The runner's torch dtype for option ``dtype`` on ``device``; a refused pair is a `Problem`."""
    from radixflow.models.device import DeviceError, resolve_dtype

    try:
        return resolve_dtype(name, device)
    except DeviceError as e:
        raise ProblemError(Problem("dtype", str(e))) from None


def _footprint(path: Path) -> object:
    from radixflow.runners.footprint import footprint

    return footprint(path)


def _model_errors() -> tuple[type[BaseException], ...]:
    from radixflow.models.device import DeviceError
    from radixflow.models.io.loader import CheckpointError
    from radixflow.models.registry import UnknownModelError
    from radixflow.models.zoo import ModelUnavailableError

    return (
        UnknownModelError,
        CheckpointError,
        ModelUnavailableError,
        DeviceError,
        NotImplementedError,
        OSError,
    )


def _guard(make):  # type: ignore[no-untyped-def]
    """``make()``, with a model that cannot be read or built turned into a `Problem` on ``model``."""
    try:
        return make()
    except _model_errors() as e:
        raise ProblemError(Problem("model", str(e))) from None


def device_problem(device: str, local: bool = True) -> Problem | None:
    """Why the torch runner cannot run on ``device`` here (None: it can). Cheap: nothing is built,
    so a door that only passes the device on (an experiment's ``--device``) checks it up front.
    ``local`` False: the device is a Ray cluster's, only its name is checked (a device this
    machine lacks, or no torch here, is the cluster's business)."""
    try:
        from radixflow.models.device import DeviceError, check_device, parse_device
    except ImportError as e:
        if not local:
            return None
        return Problem("runner", f"the torch runner needs the torch extra: pip install -e '.[torch]' ({e})")
    try:
        check_device(device) if local else parse_device(device)
    except DeviceError as e:
        return Problem("device", str(e))
    return None


def _resolve(name: str, device: str) -> Path:
    """The model's directory (a zoo model is built there on first use)."""
    problem = device_problem(device)  # before any model is built or loaded
    if problem is not None:
        raise ProblemError(problem)
    from radixflow.models.zoo import ensure_model

    return _guard(lambda: ensure_model(name))


RUNNER_CHOICES: dict[str, type[SimChoice] | type[TorchChoice]] = {"sim": SimChoice, "torch": TorchChoice}


def runner_name(options: EngineOptions) -> str:
    """The runner the options ask for: given, else sim for a sim shape (or no model), else torch."""
    if options.runner is not None:
        return options.runner
    return "sim" if options.model is None or options.model in SIM_MODELS else "torch"


def name_problem(options: EngineOptions) -> Problem | None:
    """Why ``options.model`` names no model the runner can have (None: it may). Cheap: nothing is
    built or read, so a config of many cells is checked before any runs."""
    name, runner = options.model, runner_name(options)
    if name is None:
        return None
    if runner == "sim":
        return sim_name_problem(name)
    from radixflow.models.zoo import file_problem, model_names

    path = Path(name).expanduser()  # "~/ck", as the loader reads it
    if name in model_names() or path.is_dir():
        return None
    known = f"zoo names: {', '.join(model_names())}"
    if options.runner is None:
        known += f"; sim shapes: {', '.join(SIM_MODELS)}"
    # a file of a checkpoint (its config.json) says which directory was meant, not "unknown"
    return Problem("model", file_problem(path) or f"unknown {runner} model {name!r} ({known})")


def choose_runner(options: EngineOptions) -> RunnerChoice:
    """The runner choice for ``options`` (resolves, and for a zoo name builds, the model)."""
    return RUNNER_CHOICES[runner_name(options)](options)
