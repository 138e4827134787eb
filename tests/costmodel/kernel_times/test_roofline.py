"""The roofline's stated efficiencies against the measured tables they say they come from."""

from __future__ import annotations

import statistics

import pytest

from radixflow.costmodel.kernel_times import roofline
from radixflow.costmodel.kernel_times.measured import GPUS, kernel_times
from radixflow.costmodel.kernel_times.roofline import RooflineKernels
from radixflow.costmodel.kernel_times.table_files import read_table


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


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def test_gemm_fraction_is_the_median_the_measured_large_gemms_reach():
    # WHY_GEMM's source: H200 bf16 GEMMs with m, n and k of 2048 or more in the shipped tables
    peak = GPUS["h200"].peak_flops
    rates = [
        2.0 * m * n * k / (ms * 1e-3) / peak
        for m, n, k, ms in read_table("h200", "gemm")
        if min(m, n, k) >= 2048
    ]
    assert pytest.approx(_median(rates), rel=0.1) == roofline.GEMM_EFFICIENCY
    # and the source states their spread as measured: it said 73-87% "for m >= 2048", where
    # GEMMs with a small n or k run at 10% of peak and less
    deciles = statistics.quantiles(rates, n=10)
    median = f"median {_median(rates):.0%}"
    spread = f"{deciles[0] * 100:.0f}-{deciles[-1]:.0%} of peak (10th to 90th percentile, {median})"
    assert f"with m, n and k all >= 2048 run at {spread}" in roofline.WHY_GEMM


def test_attention_fraction_is_what_measured_causal_prefill_reaches_between_2k_and_8k_tokens():
    # WHY_ATTENTION's source: H200 causal prefill attention (one request, 128-wide heads, 16 or
    # more of them) in the shipped tables, at 2k and 8k tokens; the fraction lies between the two
    peak = GPUS["h200"].peak_flops

    def reached(tokens: int) -> float:
        return _median(
            [
                4.0 * batch * heads * dim * isl * isl / 2 / (ms * 1e-3) / peak
                for heads, _kv, dim, batch, isl, ms in read_table("h200", "context_attention")
                if isl == tokens and dim == 128 and heads >= 16
            ]
        )

    assert reached(2048) < roofline.ATTENTION_EFFICIENCY < reached(8192)


def test_the_all_reduce_figures_are_those_of_the_shipped_tables():
    # WHY_ALLREDUCE's source: the H100 and H200 all-reduce tables. It said messages of at most
    # 4 KB take 4.2-4.8 us, but on 8 GPUs they take up to 5.6 (H100, 2 KB)
    rows = [row for gpu in ("h100", "h200") for row in read_table(gpu, "allreduce")]
    small = [ms * 1e3 for _gpus, nbytes, ms in rows if nbytes <= 4096]
    largest = max(nbytes for _gpus, nbytes, _ms in rows)
    moved = [  # GB/s of what the roofline moves: 2 (g - 1) / g of the message
        2 * (gpus - 1) / gpus * nbytes / (ms * 1e-3) / 1e9 for gpus, nbytes, ms in rows if nbytes == largest
    ]
    assert largest == 512 << 20
    assert f"at most 4 KB at {min(small):.1f}-{max(small):.1f} us" in roofline.WHY_ALLREDUCE
    assert f"512 MB, move at {min(moved):.0f}-{max(moved):.0f} GB/s" in roofline.WHY_ALLREDUCE
