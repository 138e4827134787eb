"""Where a profile's kernel times come from: a registry of `KernelTimes` sources by name.

A hardware profile names one in ``kernels`` (the H100/H200 profiles: ``measured-h100``,
``measured-h200``; ``roofline`` for a GPU without tables); a profile without one is costed by
fitted per-term rates instead (`radixflow.costmodel.round_cost.fitted_rates.CostModel`).
"""

from __future__ import annotations

from collections.abc import Callable

from radixflow.costmodel.kernel_times.contract import KernelTimes
from radixflow.costmodel.kernel_times.measured import GPUS
from radixflow.costmodel.kernel_times.measured import kernel_times as measured_kernels
from radixflow.costmodel.kernel_times.roofline import Datasheet, RooflineKernels

# source name -> the kernel times of a profile (pure: builds from the profile's figures and tables)
KERNEL_SOURCES: dict[str, Callable[[Datasheet], KernelTimes]] = {
    "roofline": RooflineKernels.from_profile,
    # NVIDIA's measured kernel latencies (aiconfigurator-core, vLLM 0.24.0 tables), one GPU each
    **{f"measured-{gpu}": (lambda _profile, gpu=gpu: measured_kernels(gpu)) for gpu in GPUS},
}


# sources that price kernels at the profile's ``flops`` (a roofline's peak); a measured source
# times its own GPU's kernels and reads none of the profile's figures
READS_PROFILE_FLOPS = frozenset({"roofline"})


# source name -> the profile figures it fixes itself (a measured GPU's datasheet): a profile of
# that source stating others has them ignored, so a file that does is refused
FIXED_FIGURES: dict[str, dict[str, float]] = {
    f"measured-{gpu}": {"flops": g.peak_flops, "bandwidth": g.bandwidth, "memory_bytes": g.memory_bytes}
    for gpu, g in GPUS.items()
}


def named_kernel_times(name: str | None, datasheet: Datasheet) -> KernelTimes | None:
    """The kernel times of source ``name`` for a GPU (None: no source named)."""
    return None if name is None else KERNEL_SOURCES[name](datasheet)
