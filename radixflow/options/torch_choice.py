"""The torch runner's choice: the model resolved (a zoo model built on first use), device, dtype,
matmul plan and kernels checked, and the pools sized, before any weight is read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from radixflow.engine.runner import Runner
from radixflow.options.choice import Capacity, EntryBytes
from radixflow.options.engine_options import EngineOptions
from radixflow.options.machine import cpu_count, pools_problem
from radixflow.problems import Problem, ProblemError
from radixflow.runners.footprint import BYTES_PER_ELEMENT
from radixflow.scheduler.config import SchedulerConfig

DEFAULT_TORCH_MODEL = "qwen3_5-small"


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

        set_torch_threads(self.threads, cpu_count())
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
    from radixflow.models.zoo_catalogue import ModelUnavailableError

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
