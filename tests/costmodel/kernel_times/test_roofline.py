"""The roofline's stated efficiencies against the measured tables they say they come from."""

from __future__ import annotations

import pytest

from radixflow.costmodel.kernel_times import roofline
from radixflow.costmodel.kernel_times.measured import GPUS, kernel_times
from radixflow.costmodel.kernel_times.roofline import RooflineKernels


def _h200_roofline() -> RooflineKernels:
    gpu = GPUS["h200"]
    return RooflineKernels("h200", gpu.peak_flops, gpu.bandwidth, gpu.memory_bytes)


@pytest.mark.parametrize("tokens", [4096, 8192])
def test_recurrent_fraction_is_what_the_measured_gdn_prefill_reaches_on_the_rooflines_own_flops(tokens):
    # WHY_GDN's source: the H200 Gated DeltaNet prefill (conv + chunked delta rule) of one request
    # of Qwen3-Next's shape (16 key / 32 value heads of 128) in the shipped aiconfigurator tables.
    # The fraction is applied to the roofline's own FLOP count, so it must be read on that count.
    shape = (tokens, 16, 32, 128, 128, 4)
    measured_s = kernel_times("h200").gdn_prefill(*shape).seconds
    roof = _h200_roofline().gdn_prefill(*shape)
    reached = roof.flops / measured_s / GPUS["h200"].peak_flops
    assert pytest.approx(reached, rel=0.15) == roofline.RECURRENT_EFFICIENCY
