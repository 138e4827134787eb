"""`radixflow calibrate`: time the torch runner on designed batches, fit, score, write the profile."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from radixflow.calibration.design import DesignBatch, fit_design, held_out_design
from radixflow.calibration.fit import ModelError, fit_profile
from radixflow.calibration.timing import BLOCK_SIZE, TimedBatch, time_batches
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.shape.hf_config import shape_from_checkpoint
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.runners.profile_store import RunnerSettings
from radixflow.scheduler.config import SchedulerConfig


@dataclass(frozen=True)
class CalibrationPlan:
    models: tuple[str, ...]
    device: str = "cpu"
    # largest round timed: the scheduler's round budget, so the fit covers every round size a
    # default engine runs (a fit on smaller rounds misprices the full ones, whose activations
    # no longer stay in a core's cache)
    max_tokens: int = SchedulerConfig.token_budget
    held_out: int = 12  # held-out rounds per model
    repeats: int = 5  # timings per round
    threads: int = 1  # torch intra-op threads: one gives stable timings on a shared small machine
    clock: str = "cpu"  # a name in engine.clocks.ROUND_CLOCKS
    seed: int = 1
    kept: str = "min"  # which of a round's repeated timings the fit takes (`timing.KEPT`)
    dtype: str = "float32"  # the runner's weights and activations (a key of `DTYPE_BYTES`)
    # the torch runner's decode kernels and matmul plan, as --kernels and --matmul take them: the
    # stored profile is keyed by what they resolve to, so a run on others finds it only if timed so
    kernels: str = "auto"
    matmul: str = "auto"


# bytes per weight and KV element of each dtype the torch runner computes in
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def model_shape(model: str) -> ModelShape:
    """The cost-model shape of a zoo model or local checkpoint (builds the zoo model if needed)."""
    from radixflow.models.zoo import ensure_model

    path = ensure_model(model)
    return shape_from_checkpoint(model, path)


def design(plan: CalibrationPlan, shape: ModelShape) -> list[DesignBatch]:
    """The rounds timed on ``shape``: none reaches past its context, which no engine runs it at
    (ValueError where the context holds no held-out round)."""
    hybrid, context = shape.has_recurrent, shape.max_context
    fit = fit_design(plan.max_tokens, BLOCK_SIZE, hybrid, context)
    return fit + held_out_design(plan.held_out, plan.max_tokens, BLOCK_SIZE, hybrid, plan.seed, context)


def total_batches(plan: CalibrationPlan, shapes: dict[str, ModelShape]) -> int:
    """Worker calls timed over every model of ``plan`` (``shapes``: each model's)."""
    fit = sum(len(fit_design(plan.max_tokens, BLOCK_SIZE, True, shapes[m].max_context)) for m in plan.models)
    return (fit + len(plan.models) * plan.held_out) * plan.repeats


def calibrate(
    plan: CalibrationPlan,
    name: str,
    on_batch: Callable[[], None] | None = None,
) -> tuple[HardwareProfile, list[ModelError]]:
    """Timed rounds of every model, one joint fit, each model's held-out error; the profile's
    ``calibration["runners"]`` names the kernels and matmul routes each model was timed on."""
    shapes = {m: model_shape(m) for m in plan.models}
    timed: list[TimedBatch] = []
    runners: dict[str, RunnerSettings] = {}
    for model in plan.models:
        batches = design(plan, shapes[model])
        timed += time_batches(
            model,
            plan.device,
            batches,
            plan.repeats,
            plan.threads,
            on_batch,
            plan.clock,
            plan.kept,
            plan.dtype,
            runners,
            kernels=plan.kernels,
            matmul=plan.matmul,
        )
    profile, errors = refit(name, timed, shapes, plan.device, plan.dtype)
    if profile.calibration is not None:
        profile.calibration["runners"] = {m: asdict(s) for m, s in runners.items()}
        profile.calibration["machine"] = measured_on(plan.device)
    return profile, errors


def measured_on(device: str) -> dict[str, object]:
    """The machine the rounds were timed on, as the round-profile store names one (its CPU or GPU
    model, CPUs, torch version): where every figure of a calibrated profile was measured."""
    import torch

    from radixflow.runners.profile_store import processor_name

    dev = torch.device(device)
    accelerator = torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
    return {
        "cpu": processor_name(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "device": dev.type,
        "accelerator": accelerator,
    }


def refit(
    name: str, timed: list[TimedBatch], shapes: dict[str, ModelShape], device: str, dtype: str = "float32"
) -> tuple[HardwareProfile, list[ModelError]]:
    profile = fit_profile(name, timed, shapes, DTYPE_BYTES[dtype], device)
    errors = [ModelError(**e) for e in (profile.calibration or {}).get("errors", [])]
    return profile, errors
