"""A model by name or path -> its torch runner, tokenizer and an engine (offline API and server)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from radixflow.engine.engine import Engine
from radixflow.engine.runner import Runner
from radixflow.generation.tokenizer import TextTokenizer, TokenizerError
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES
from radixflow.scheduler.scheduler import SchedulerConfig


class ModelSetupError(ValueError):
    """The model, its tokenizer or the engine options cannot be set up (a one-line reason)."""


@dataclass(frozen=True)
class EngineOptions:
    """How the engine around a model is built. The torch runner allocates its KV and state pools
    up front, so ``kv_blocks`` × ``block_size`` is the most tokens the cache ever holds."""

    policy: str = "radixflow"
    placement: str = "branch"
    device: str = "cpu"
    block_size: int = 16
    kv_blocks: int = 1024
    state_slots: int = 256
    token_budget: int = 2048
    max_requests: int = 32
    round_history: int | None = None  # rounds kept by the engine (None: all)

    def scheduler_config(self) -> SchedulerConfig:
        return SchedulerConfig(
            token_budget=self.token_budget,
            max_requests=self.max_requests,
            block_size=self.block_size,
            num_blocks=self.kv_blocks,
            num_state_slots=self.state_slots,
        )

    def problem(self) -> str | None:
        """Why these options cannot build an engine (None when they can). Pure."""
        if self.policy not in SCHEDULING_POLICIES:
            return f"unknown policy {self.policy!r} (known: {', '.join(SCHEDULING_POLICIES)})"
        if self.placement not in PLACEMENTS:
            return f"unknown placement {self.placement!r} (known: {', '.join(PLACEMENTS)})"
        if self.kv_blocks < 1 or self.state_slots < 0:
            return "kv_blocks must be >= 1 and state_slots >= 0"
        try:
            self.scheduler_config().validate()
        except ValueError as e:
            return str(e)
        return None


@dataclass
class LoadedModel:
    name: str  # as the user named it (zoo name or path): what the server reports as its model id
    path: Path
    runner: Runner
    tokenizer: TextTokenizer


def _model_errors() -> tuple[type[BaseException], ...]:
    from radixflow.models.device import DeviceError
    from radixflow.models.io.loader import CheckpointError
    from radixflow.models.registry import UnknownModelError
    from radixflow.models.zoo import ModelUnavailableError

    return (UnknownModelError, CheckpointError, ModelUnavailableError, DeviceError, TokenizerError, OSError)


def model_path(name: str) -> Path:
    """The model's directory: a zoo model is built there the first time; a path is checked."""
    try:
        from radixflow.models.zoo import ensure_model

        errors = _model_errors()
    except ImportError as e:
        raise ModelSetupError(f"generation needs the torch extra: pip install -e '.[torch]' ({e})") from None
    try:
        return ensure_model(name)
    except errors as e:
        raise ModelSetupError(str(e)) from None


def load_model(name: str, options: EngineOptions) -> LoadedModel:
    """Build (zoo name, first time) or read the model, its tokenizer and a torch runner."""
    problem = options.problem()
    if problem is not None:
        raise ModelSetupError(problem)
    path = model_path(name)
    from radixflow.models.device import check_device
    from radixflow.runners.torch_runner import TorchRunner

    try:
        check_device(options.device)
        tokenizer = TextTokenizer.load(path)
        runner = TorchRunner(
            path,
            options.block_size,
            options.kv_blocks,
            options.state_slots,
            device=options.device,
            label=name,
        )
    except _model_errors() as e:
        raise ModelSetupError(str(e)) from None
    return LoadedModel(name, path, runner, tokenizer)


def build_engine(model: LoadedModel, options: EngineOptions) -> Engine:
    return Engine(
        model.runner,
        options.scheduler_config(),
        policy=options.policy,
        placement=options.placement,
        round_history=options.round_history,
    )
