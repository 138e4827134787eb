"""Which runner a benchmark uses: small classes behind one protocol, chosen by name."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from radixflow.engine.runner import Runner
from radixflow.runners.sim import DEFAULT_SIM_MODEL, SIM_MODELS, HardwareProfile, SimRunner
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig


class RunnerSetupError(ValueError):
    """The chosen model or runner cannot be set up (a user-facing, one-line reason)."""


@dataclass(frozen=True)
class Capacity:
    kv_blocks: int
    state_slots: int


class RunnerChoice(Protocol):
    name: str

    def vocab_size(self) -> int:
        """Vocabulary of the chosen model (workloads draw token ids below it). Pure."""
        ...

    def capacity(self, requests: list[Request], block_size: int) -> Capacity:
        """Default cache capacity for this workload when the user gave none. Pure."""
        ...

    def build(self, scheduler: SchedulerConfig) -> Runner:
        """Construct the runner (may build or load model weights)."""
        ...

    def describe(self) -> dict[str, object]:
        """Runner settings to record beside the results."""
        ...


class SimChoice:
    name = "sim"

    def __init__(self, model: str | None, hardware: HardwareProfile) -> None:
        model = model or DEFAULT_SIM_MODEL
        if model not in SIM_MODELS:
            raise RunnerSetupError(f"unknown sim model {model!r} (known: {', '.join(SIM_MODELS)})")
        self.spec, self.hardware = SIM_MODELS[model], hardware

    def vocab_size(self) -> int:
        return self.spec.vocab_size

    def capacity(self, requests: list[Request], block_size: int) -> Capacity:
        default = SchedulerConfig()
        return Capacity(default.num_blocks, default.num_state_slots)

    def build(self, scheduler: SchedulerConfig) -> Runner:
        return SimRunner(self.spec, self.hardware)

    def describe(self) -> dict[str, object]:
        return {"hardware": asdict(self.hardware)}


class TorchChoice:
    name = "torch"
    default_model = "qwen3_5-small"

    def __init__(self, model: str | None, device: str) -> None:
        self.label, self.device = model or self.default_model, device
        self.path = self._resolve(self.label)

    @staticmethod
    def _errors() -> tuple[type[BaseException], ...]:
        from radixflow.models.device import DeviceError
        from radixflow.models.io.loader import CheckpointError
        from radixflow.models.registry import UnknownModelError
        from radixflow.models.zoo import ModelUnavailableError

        errors = (UnknownModelError, CheckpointError, ModelUnavailableError, DeviceError)
        return (*errors, NotImplementedError, OSError)

    def _resolve(self, name: str) -> Path:
        try:
            from radixflow.models.device import check_device
            from radixflow.models.zoo import ensure_model
        except ImportError as e:
            raise RunnerSetupError(f"the torch runner needs: pip install -e '.[torch]' ({e})") from None
        try:
            check_device(self.device)  # before any model is built or loaded
            return ensure_model(name)
        except self._errors() as e:
            raise RunnerSetupError(str(e)) from None

    def vocab_size(self) -> int:
        from radixflow.models.io.loader import read_config

        try:
            return int(read_config(self.path).vocab_size)
        except self._errors() as e:
            raise RunnerSetupError(str(e)) from None

    def capacity(self, requests: list[Request], block_size: int) -> Capacity:
        # Real pools are allocated up front: size them to the workload, not to a GPU.
        need = sum(-(-len(r.prompt) // block_size) + 1 for r in requests)
        return Capacity(max(need, 64), 256)

    def build(self, scheduler: SchedulerConfig) -> Runner:
        from radixflow.runners.torch_runner import TorchRunner

        try:
            return TorchRunner(
                self.path,
                scheduler.block_size,
                scheduler.num_blocks,
                scheduler.num_state_slots,
                device=self.device,
                label=self.label,
            )
        except self._errors() as e:
            raise RunnerSetupError(f"cannot load {self.path}: {e}") from None

    def describe(self) -> dict[str, object]:
        return {"device": self.device, "checkpoint": str(self.path)}


RUNNER_CHOICES = ("sim", "torch")
