"""The round cost model a profile asks for: kernel by kernel (a profile that names ``kernels``)
or by fitted per-term rates (one that does not)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.kernel_times.sources import named_kernel_times
from radixflow.costmodel.round_cost.breakdown import RoundBreakdown
from radixflow.costmodel.round_cost.fitted_rates import CostModel
from radixflow.costmodel.round_cost.kernel_sum import KernelCostModel
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.model_shape import ModelShape


class RoundCostModel(Protocol):
    shape: ModelShape
    hardware: HardwareProfile

    @property
    def tp(self) -> int:
        """GPUs the model runs on (tensor parallelism; 1 for a fitted profile). Pure."""
        ...

    def breakdown(self, chunks: Iterable[ChunkShape]) -> RoundBreakdown:
        """Every term of the round computing ``chunks``; their seconds sum to the round. Pure."""
        ...

    def round_seconds(self, chunks: Iterable[ChunkShape]) -> float:
        """How far the round advances the clock (`breakdown(...).seconds`). Pure."""
        ...


def round_cost_model(shape: ModelShape, hardware: HardwareProfile) -> RoundCostModel:
    kernels = named_kernel_times(hardware.kernels, hardware)
    if kernels is None:
        return CostModel(shape, hardware)
    return KernelCostModel(shape, hardware, kernels)
