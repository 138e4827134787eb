"""Where a profile's kernel times come from: a registry of `KernelTimes` sources by name.

A hardware profile names one in ``kernels`` (the H100/H200 profiles: ``measured-h100``,
``measured-h200``; ``roofline`` for a GPU without tables); a profile without one is costed by
fitted per-term rates instead (`radixflow.costmodel.model.CostModel`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from radixflow.costmodel.kernel_times import KernelTimes
from radixflow.costmodel.measured import GPUS
from radixflow.costmodel.measured import kernel_times as measured_kernels
from radixflow.costmodel.roofline import RooflineKernels

if TYPE_CHECKING:
    from radixflow.costmodel.hardware import HardwareProfile

# source name -> the kernel times of a profile (pure: builds from the profile's figures and tables)
KERNEL_SOURCES: dict[str, Callable[[HardwareProfile], KernelTimes]] = {
    "roofline": RooflineKernels.from_profile,
    # NVIDIA's measured kernel latencies (aiconfigurator-core, vLLM 0.24.0 tables), one GPU each
    **{f"measured-{gpu}": (lambda _profile, gpu=gpu: measured_kernels(gpu)) for gpu in GPUS},
}


def kernel_times(profile: HardwareProfile) -> KernelTimes | None:
    """The kernel times the profile names (None: it names none)."""
    return None if profile.kernels is None else KERNEL_SOURCES[profile.kernels](profile)
