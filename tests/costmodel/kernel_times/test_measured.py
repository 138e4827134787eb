"""Measured kernel times (H100/H200): grid points, interpolation, borrowed shapes, rooflines."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from radixflow.costmodel.kernel_times import kernel_work as kw
from radixflow.costmodel.kernel_times import measured_tables as mt
from radixflow.costmodel.kernel_times.contract import KernelTimes, TermCost
from radixflow.costmodel.kernel_times.measured import GPUS, KernelTablesError, MeasuredKernels, kernel_times
from radixflow.costmodel.kernel_times.table_files import read_table

MS = 1e-3
GPU_NAMES = sorted(GPUS)


@pytest.fixture(scope="module", params=GPU_NAMES)
def kt(request) -> MeasuredKernels:
    return kernel_times(request.param)


def rows_where(gpu: str, table: str, **match: int) -> list[tuple]:
    from radixflow.costmodel.kernel_times.table_files import COLUMNS

    cols = COLUMNS[table]
    return [r for r in read_table(gpu, table) if all(r[cols.index(c)] == v for c, v in match.items())]


def test_registry_has_datasheet_figures():
    h100, h200 = kernel_times("h100"), kernel_times("h200")
    assert (h100.memory_bytes, h100.bandwidth) == (80e9, 3.35e12)
    assert (h200.memory_bytes, h200.bandwidth) == (141e9, 4.8e12)
    assert h200.name == "h200" and all(GPUS[n].sources for n in GPU_NAMES)
    typed: KernelTimes = h200  # the protocol the cost model calls
    assert typed.gemm(1, 128, 128).seconds > 0


def test_an_unknown_gpu_is_one_clear_error():
    with pytest.raises(KernelTablesError, match="'a100'") as err:
        kernel_times("a100")
    assert err.value.problem.param == "hardware"


def test_gemm_at_a_grid_point_is_the_measurement(kt):
    m, n, k, latency = rows_where(kt.name, "gemm", m=256, n=4096, k=4096)[0]
    cost = kt.gemm(m, n, k)
    assert cost.seconds == latency * MS
    assert cost.source == f"measured: {kt.name}_sxm/gemm/vllm/0.24.0/gemm_perf (exact)"
    assert cost.flops == 2.0 * m * n * k


def test_gemm_between_grid_points_lies_between_neighbours(kt):
    curve = {r[0]: r[-1] * MS for r in rows_where(kt.name, "gemm", n=4096, k=4096)}
    lo, hi = 4352, 8192
    cost = kt.gemm(6000, 4096, 4096)
    assert min(curve[lo], curve[hi]) < cost.seconds < max(curve[lo], curve[hi])
    assert "(interpolated)" in cost.source


def test_an_unmeasured_n_k_inside_the_grid_interpolates_efficiency_between_measured_ones(kt):
    cost = kt.gemm(512, 19456, 2560)  # n between the measured 16384 and 51200
    assert "between measured (n, k)=(16384..51200, 2560)" in cost.source
    rate = cost.flops / cost.seconds
    rates = [kt.gemm(512, n, 2560) for n in (16384, 51200)]
    assert min(c.flops / c.seconds for c in rates) <= rate <= max(c.flops / c.seconds for c in rates)


def test_an_unmeasured_n_k_outside_the_grid_borrows_the_nearest_efficiency(kt):
    cost = kt.gemm(2048, 70000, 4096)  # past the largest measured n (65536)
    assert "nearest (n, k)=(65536, 4096)" in cost.source
    near = kt.gemm(2048, 65536, 4096)
    assert cost.flops / cost.seconds == pytest.approx(near.flops / near.seconds)


def test_gemm_beyond_the_largest_m_keeps_its_efficiency(kt):
    last, beyond = kt.gemm(32768, 4096, 4096), kt.gemm(65536, 4096, 4096)
    assert "extrapolated" in beyond.source
    assert beyond.seconds == pytest.approx(2 * last.seconds, rel=0.01)


def test_prefill_attention_at_a_grid_point_is_the_measurement(kt):
    (row,) = rows_where(kt.name, "context_attention", heads=32, kv_heads=8, head_dim=128, batch=1, isl=2048)
    assert kt.prefill_attention(2048, 2048, 32, 8, 128).seconds == row[-1] * MS


def test_a_chunk_over_a_cached_prefix_costs_between_decode_and_a_full_prefill(kt):
    chunk = kt.prefill_attention(512, 8192, 32, 8, 128)
    assert "cached prefix" in chunk.source
    full = kt.prefill_attention(8192, 8192, 32, 8, 128)
    one_query = kt.decode_attention(1, 8192, 32, 8, 128)
    assert one_query.seconds <= chunk.seconds < full.seconds
    # a short chunk over a long prefix is bound by reading the prefix's keys once
    assert (
        kt.prefill_attention(2, 65536, 32, 8, 128).seconds
        >= kt.decode_attention(1, 65536, 32, 8, 128).seconds
    )


def test_prefill_attention_rejects_a_context_shorter_than_the_chunk(kt):
    with pytest.raises(ValueError, match="context 10 < tokens 20"):
        kt.prefill_attention(20, 10, 32, 8, 128)


def test_decode_attention_at_and_between_grid_points(kt):
    rows = {
        r[4]: r[-1] * MS
        for r in rows_where(kt.name, "generation_attention", heads=32, kv_heads=8, head_dim=128, batch=16)
    }
    assert kt.decode_attention(16, 4096, 32, 8, 128).seconds == rows[4096]
    between = kt.decode_attention(16, 6000, 32, 8, 128).seconds
    assert rows[4096] < between < rows[8192]


def test_gdn_sums_the_conv_and_the_delta_rule_of_a_phase(kt):
    def latency(kernel: str, batch: int, seq_len: int) -> float:
        (row,) = [
            r
            for r in read_table(kt.name, "gdn")
            if r[0] == kernel and r[1:3] == (16, 32) and r[6:8] == (batch, seq_len)
        ]
        return row[-1] * MS

    prefill = kt.gdn_prefill(4096, 16, 32, 128, 128, 4)
    assert prefill.seconds == pytest.approx(
        latency("conv_prefill", 1, 4096) + latency("rule_prefill", 1, 4096)
    )
    assert "causal_conv1d_fn" in prefill.source and "chunk_gated_delta_rule" in prefill.source
    decode = kt.gdn_decode(64, 16, 32, 128, 128, 4)
    assert decode.seconds == pytest.approx(latency("conv_decode", 64, 1) + latency("rule_decode", 64, 1))


def test_moe_and_allreduce_at_grid_points(kt):
    (row,) = rows_where(kt.name, "moe", hidden=2048, inter=768, experts=128, topk=8, tokens=512)
    assert kt.moe(512, 2048, 768, 128, 8).seconds == row[-1] * MS
    (row,) = rows_where(kt.name, "allreduce", gpus=4, bytes=1 << 20)
    cost = kt.allreduce(1 << 20, 4)
    assert cost.seconds == row[-1] * MS and "custom_allreduce_perf" in cost.source
    assert kt.allreduce(1 << 20, 1).seconds == 0.0  # nothing to reduce on one GPU


def test_unmeasured_kernels_use_a_labelled_roofline(kt):
    for cost in (
        kt.mamba2_prefill(2048, 128, 64, 128, 8, 4),
        kt.mamba2_decode(32, 128, 64, 128, 8, 4),
        kt.short_conv(2048, 2048, 3),
    ):
        assert cost.source.startswith("roofline: no ")
        assert "gdn_perf" in cost.source  # names the kernel whose efficiency it borrows
        assert cost.seconds >= kt.roofline.time((cost.flops, cost.bytes))


@pytest.mark.parametrize(
    "one",
    [
        lambda kt, b: kt.mamba2_prefill(32, 128, 64, 128, 8, 4, b),  # Nemotron-H-8B's widths
        lambda kt, b: kt.gdn_prefill(32, 16, 32, 128, 128, 4, b),
    ],
    ids=["mamba2", "gdn"],
)
def test_a_batch_of_equal_recurrent_chunks_moves_each_sequences_bytes(kt, one):
    """Every sequence of a batched prefill reads its own inputs and writes its own final state:
    B equal chunks move B times one chunk's bytes (the Mamba2 scan wrote one state per call)."""
    assert one(kt, 32).bytes == pytest.approx(32 * one(kt, 1).bytes)


def test_a_tiny_unmeasured_kernel_costs_at_least_the_borrowed_kernels_launch_floor(kt):
    tiny = kt.mamba2_prefill(1, 8, 32, 16, 1, 2)
    fastest_scan = min(r[-1] for r in read_table(kt.name, "gdn") if r[0] == "rule_prefill") * MS
    assert tiny.seconds >= fastest_scan


def test_zero_sizes_cost_nothing_and_negative_ones_are_refused(kt):
    assert kt.gemm(0, 4096, 4096).seconds == 0.0
    assert kt.decode_attention(0, 100, 32, 8, 128).seconds == 0.0
    with pytest.raises(ValueError, match="sizes must be finite and >= 0"):
        kt.gemm(-1, 4096, 4096)
    with pytest.raises(ValueError, match="topk 9 > experts 8"):
        kt.moe(4, 1024, 1024, 8, 9)


def test_tables_are_built_once_and_lookups_memoized():
    rows = {"gemm": [(1, 64, 64, 0.01), (16, 64, 64, 0.02)]}
    kt = MeasuredKernels(GPUS["h200"], rows=rows)
    table = kt.gemm_table
    first = kt.gemm(8, 64, 64)
    assert kt.gemm_table is table
    assert kt.gemm(8, 64, 64) is first
    assert kt.gemm(16, 64, 64).seconds == 0.02 * MS


def finite_positive(cost: TermCost) -> bool:
    # "; " is TermCost.__add__'s separator between different sources: none holds it itself
    named = bool(cost.source) and "; " not in cost.source
    return math.isfinite(cost.seconds) and cost.seconds > 0 and named and cost.flops >= 0


sizes = st.integers(min_value=1, max_value=1 << 15)
heads_kv = st.tuples(st.integers(0, 7), st.integers(0, 4)).map(lambda p: (1 << p[0], 1 << min(p)))
head_dims = st.sampled_from([64, 80, 128, 256])
GPU = st.sampled_from(GPU_NAMES)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(gpu=GPU, m=sizes, n=sizes, k=sizes)
def test_gemm_is_finite_and_positive(gpu, m, n, k):
    assert finite_positive(kernel_times(gpu).gemm(m, n, k))


@FAST
@given(gpu=GPU, tokens=sizes, extra=st.integers(0, 1 << 17), hk=heads_kv, d=head_dims, batch=sizes)
def test_attention_is_finite_and_positive(gpu, tokens, extra, hk, d, batch):
    kt = kernel_times(gpu)
    assert finite_positive(kt.prefill_attention(tokens, tokens + extra, hk[0], hk[1], d))
    assert finite_positive(kt.decode_attention(batch, tokens + extra, hk[0], hk[1], d))


@FAST
@given(
    gpu=GPU,
    n=sizes,
    kh=st.sampled_from([1, 2, 4, 16, 32]),
    ratio=st.sampled_from([1, 2, 3, 4]),
    head=st.sampled_from([64, 128, 256]),
    conv=st.integers(2, 4),
)
def test_gdn_is_finite_and_positive(gpu, n, kh, ratio, head, conv):
    kt = kernel_times(gpu)
    assert finite_positive(kt.gdn_prefill(n, kh, kh * ratio, head, head, conv))
    assert finite_positive(kt.gdn_decode(n, kh, kh * ratio, head, head, conv))


@FAST
@given(
    gpu=GPU,
    n=sizes,
    heads=st.sampled_from([8, 24, 64, 128, 256]),
    head_dim=st.sampled_from([32, 64]),
    state=st.sampled_from([16, 64, 128, 256]),
    groups=st.sampled_from([1, 2, 8]),
    channels=st.integers(64, 1 << 14),
    kernel=st.integers(2, 4),
)
def test_rooflines_are_finite_and_positive(gpu, n, heads, head_dim, state, groups, channels, kernel):
    kt = kernel_times(gpu)
    assert finite_positive(kt.mamba2_prefill(n, heads, head_dim, state, groups, kernel))
    assert finite_positive(kt.mamba2_decode(n, heads, head_dim, state, groups, kernel))
    assert finite_positive(kt.short_conv(n, channels, kernel))


@FAST
@given(
    gpu=GPU,
    tokens=sizes,
    hidden=st.integers(256, 8192),
    inter=st.integers(64, 16384),
    experts=st.integers(1, 1024),
    topk=st.integers(1, 16),
    nbytes=st.integers(1, 1 << 33),
    gpus=st.integers(2, 16),
)
def test_moe_and_allreduce_are_finite_and_positive(gpu, tokens, hidden, inter, experts, topk, nbytes, gpus):
    kt = kernel_times(gpu)
    assert finite_positive(kt.moe(tokens, hidden, inter, experts, min(topk, experts)))
    assert finite_positive(kt.allreduce(nbytes, gpus))


@pytest.mark.parametrize(
    ("site_order", "axes_order", "site", "axes"),
    [((1, 2), (0,), (6, 7), (5,)), ((2,), (0, 1), (7,), (5, 6)), ((0, 2), (1,), (5, 7), (6,))],
)
def test_a_table_splits_a_key_by_its_spec_s_columns(site_order, axes_order, site, axes):
    # the columns are picked by itemgetter, which gives one column bare: each part stays a tuple,
    # of a list key too (a validation's row read back)
    spec = mt.TableSpec(len(site), "(s)", mt.GEMM.work, site_order=site_order, axes_order=axes_order)
    table = mt.MeasuredTable(spec, "t", kw.Roofline(1.0, 1.0), [(5, 6, 7, 1.0)])
    assert table.split((5, 6, 7)) == (site, axes)
    assert table.split([5, 6, 7]) == (site, axes)
