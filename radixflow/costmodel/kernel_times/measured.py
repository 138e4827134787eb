"""`KernelTimes` from measured kernel latencies: the GPU cost model's default on H100 and H200.

Every figure comes from NVIDIA's aiconfigurator-core 0.12.0 tables for vLLM 0.24.0 (shipped in
``data/``, see `table_files`), interpolated by `measured_tables`. Kernels with no measurement
(Mamba2's conv and scan, LFM2's short conv) are priced by `borrowed` on their roofline at the
efficiency of the nearest measured kernel class, and say so in their source.

Tables are read on first use, once per process; lookups are memoized by argument. No source
contains "; ", the separator `TermCost.__add__` joins different sources with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, wraps
from numbers import Real
from pathlib import Path
from typing import Any, TypeVar

from radixflow.costmodel.kernel_times import kernel_work as kw
from radixflow.costmodel.kernel_times import measured_tables as mt
from radixflow.costmodel.kernel_times.borrowed import Borrowed
from radixflow.costmodel.kernel_times.contract import ZERO, TermCost
from radixflow.costmodel.kernel_times.table_files import DATA_DIR, GDN_KERNELS, Row, read_table, table_label
from radixflow.problems import Problem

DENSE_BF16_FLOPS = 989e12
MEMO_LIMIT = 1 << 16  # distinct calls remembered per GPU before the memo starts over


@dataclass(frozen=True)
class GpuSpec:
    """A GPU's datasheet figures: what rooflines and weight reads are priced at."""

    name: str
    memory_bytes: float
    bandwidth: float  # HBM bytes/s
    peak_flops: float  # dense bf16 tensor-core FLOP/s
    link_bandwidth: float  # NVLink bytes/s per GPU, one direction
    sources: dict[str, str] = field(default_factory=dict)


GPUS: dict[str, GpuSpec] = {
    "h100": GpuSpec(
        name="h100",
        memory_bytes=80e9,
        bandwidth=3.35e12,
        peak_flops=DENSE_BF16_FLOPS,
        link_bandwidth=450e9,
        sources={
            "memory_bytes": "NVIDIA H100 SXM datasheet: 80 GB HBM3",
            "bandwidth": "NVIDIA H100 SXM datasheet: 3.35 TB/s",
            "peak_flops": "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense BF16 Tensor Core",
            "link_bandwidth": "NVIDIA H100 SXM datasheet: NVLink 900 GB/s (450 GB/s each way)",
        },
    ),
    "h200": GpuSpec(
        name="h200",
        memory_bytes=141e9,
        bandwidth=4.8e12,
        peak_flops=DENSE_BF16_FLOPS,
        link_bandwidth=450e9,
        sources={
            "memory_bytes": "NVIDIA H200 datasheet: 141 GB HBM3e",
            "bandwidth": "NVIDIA H200 datasheet: 4.8 TB/s",
            "peak_flops": "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense BF16 Tensor Core",
            "link_bandwidth": "NVIDIA H200 SXM datasheet: NVLink 900 GB/s (450 GB/s each way)",
        },
    ),
}


class KernelTablesError(ValueError):
    """A GPU with no kernel tables (one line; ``problem`` names the parameter)."""

    def __init__(self, message: str, param: str = "hardware") -> None:
        super().__init__(message)
        self.problem = Problem(param, message)


F = TypeVar("F", bound=Callable[..., TermCost])


def _sized(fn: F) -> F:
    """Checks a call's sizes (ints or floats, none negative or non-finite; a zero size costs
    nothing) and memoizes it by its arguments."""

    @wraps(fn)
    def call(self: MeasuredKernels, *args: Any) -> TermCost:
        key = (fn.__name__, *args)
        found = self._memo.get(key)
        if found is not None:
            return found
        for value in args:
            if not isinstance(value, Real) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{fn.__name__}: sizes must be finite and >= 0, got {args!r}")
        cost = ZERO if 0 in args else fn(self, *args)
        if len(self._memo) >= MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = cost
        return cost

    return call  # type: ignore[return-value]


class MeasuredKernels:
    """`KernelTimes` for one GPU from its measured tables (``rows``: in-memory tables, e.g. a
    validation's training split; default: the shipped ones under ``root``). ``mode``: one
    interpolation for every table instead of each table's own (curves.INTERPOLATIONS)."""

    def __init__(
        self,
        gpu: GpuSpec,
        rows: Mapping[str, list[Row]] | None = None,
        root: Path = DATA_DIR,
        mode: str | None = None,
    ) -> None:
        self.gpu = gpu
        self.name = gpu.name
        self.memory_bytes = gpu.memory_bytes
        self.bandwidth = gpu.bandwidth
        self.roofline = kw.Roofline(gpu.peak_flops, gpu.bandwidth)
        self._rows = rows
        self._root = root
        self._mode = mode
        self._memo: dict[tuple, TermCost] = {}

    def _table(
        self,
        table: str,
        spec: mt.TableSpec,
        rows: list[Row] | None = None,
        label: str | None = None,
        roofline: kw.Roofline | None = None,
    ) -> mt.MeasuredTable:
        if rows is None:
            rows = self._rows[table] if self._rows is not None else read_table(self.name, table, self._root)
        if self._mode is not None:
            spec = replace(spec, mode=self._mode)
        return mt.MeasuredTable(spec, label or table_label(self.name, table), roofline or self.roofline, rows)

    @cached_property
    def gemm_table(self) -> mt.MeasuredTable:
        return self._table("gemm", mt.GEMM)

    @cached_property
    def context_table(self) -> mt.MeasuredTable:
        return self._table("context_attention", mt.CONTEXT_ATTENTION)

    @cached_property
    def generation_table(self) -> mt.MeasuredTable:
        return self._table("generation_attention", mt.GENERATION_ATTENTION)

    @cached_property
    def gdn_tables(self) -> dict[str, mt.MeasuredTable]:
        """One table per GDN kernel (gdn_perf's kernel_source), keyed as kernel_data.GDN_KERNELS."""
        rows = self._rows["gdn"] if self._rows is not None else read_table(self.name, "gdn", self._root)
        label = table_label(self.name, "gdn")
        source_of = {kernel: source for source, kernel in GDN_KERNELS.items()}
        return {
            kernel: self._table(
                "gdn", spec, [r[1:] for r in rows if r[0] == kernel], f"{label} {source_of[kernel]}"
            )
            for kernel, spec in mt.GDN.items()
        }

    @cached_property
    def moe_table(self) -> mt.MeasuredTable:
        return self._table("moe", mt.MOE)

    @cached_property
    def allreduce_table(self) -> mt.MeasuredTable:
        link = kw.Roofline(self.gpu.peak_flops, self.gpu.link_bandwidth)
        return self._table("allreduce", mt.ALLREDUCE, roofline=link)

    @cached_property
    def borrowed(self) -> Borrowed:
        return Borrowed(self.gdn_tables, self.roofline)

    @staticmethod
    def _cost(table: mt.MeasuredTable, site: mt.Site, axes: tuple[float, ...], work: kw.Work) -> TermCost:
        seconds, how = table.lookup(site, axes)
        return TermCost(seconds, work[0], work[1], table.source(how))

    @_sized
    def gemm(self, m: int, n: int, k: int) -> TermCost:
        return self._cost(self.gemm_table, (n, k), (m,), kw.gemm(m, n, k))

    @_sized
    def prefill_attention(
        self, tokens: int, context: int, heads: int, kv_heads: int, head_dim: int, batch: int = 1
    ) -> TermCost:
        """A chunk over a cached prefix (context > tokens) is not in the table: it takes as long
        as the one-sequence prefill with the same attention FLOPs (the prefill of
        sqrt(2 tokens context - tokens^2) tokens), and no less than one query reading all
        ``context`` keys (the decode table at the call's ``batch``: one query per sequence)."""
        if context < tokens:
            raise ValueError(f"prefill_attention: context {context} < tokens {tokens}")
        site = (heads, kv_heads, head_dim)
        work = kw.prefill_attention(batch, tokens, context, heads, kv_heads, head_dim)
        if context == tokens:
            return self._cost(self.context_table, site, (batch, tokens), work)
        isl = math.sqrt(2.0 * tokens * context - tokens * tokens)
        seconds, how = self.context_table.lookup(site, (batch, isl))
        floor, floor_how = self.generation_table.lookup(site, (batch, context))
        if floor > seconds:
            note = "cached prefix: one query reading every key"
            return TermCost(floor, *work, self.generation_table.source(f"{floor_how}, {note}"))
        note = "cached prefix: time of the full prefill with equal FLOPs"
        return TermCost(seconds, *work, self.context_table.source(f"{how}, {note}"))

    @_sized
    def decode_attention(
        self, batch: int, context: int, heads: int, kv_heads: int, head_dim: int
    ) -> TermCost:
        work = kw.decode_attention(batch, context, heads, kv_heads, head_dim)
        return self._cost(self.generation_table, (heads, kv_heads, head_dim), (batch, context), work)

    def _gdn(self, phase: str, batch: int, seq_len: int, site: mt.Site) -> TermCost:
        """A GDN layer's two kernels in one phase (conv, then the delta rule), summed."""
        conv_t, rule_t = self.gdn_tables[f"conv_{phase}"], self.gdn_tables[f"rule_{phase}"]
        conv_s, conv_how = conv_t.lookup(site, (batch, seq_len))
        rule_s, rule_how = rule_t.lookup(site, (batch, seq_len))
        conv_w, rule_w = conv_t.spec.work(site, batch, seq_len), rule_t.spec.work(site, batch, seq_len)
        source = f"measured: {conv_t.label} ({conv_how}) + {rule_t.label.rsplit(' ', 1)[1]} ({rule_how})"
        return TermCost(conv_s + rule_s, conv_w[0] + rule_w[0], conv_w[1] + rule_w[1], source)

    @_sized
    def gdn_prefill(
        self, tokens: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int, batch: int = 1
    ) -> TermCost:
        return self._gdn("prefill", batch, tokens, (k_heads, v_heads, head_k, head_v, conv))

    @_sized
    def gdn_decode(
        self, batch: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int
    ) -> TermCost:
        return self._gdn("decode", batch, 1, (k_heads, v_heads, head_k, head_v, conv))

    @_sized
    def mamba2_prefill(
        self, tokens: int, heads: int, head_dim: int, state: int, groups: int, conv: int, batch: int = 1
    ) -> TermCost:
        return self.borrowed.mamba2("prefill", batch, tokens, heads, head_dim, state, groups, conv)

    @_sized
    def mamba2_decode(
        self, batch: int, heads: int, head_dim: int, state: int, groups: int, conv: int
    ) -> TermCost:
        return self.borrowed.mamba2("decode", batch, 1, heads, head_dim, state, groups, conv)

    @_sized
    def short_conv(self, tokens: int, channels: int, kernel: int) -> TermCost:
        return self.borrowed.short_conv(tokens, channels, kernel)

    @_sized
    def moe(self, tokens: int, hidden: int, inter: int, experts: int, topk: int) -> TermCost:
        if topk > experts:
            raise ValueError(f"moe: topk {topk} > experts {experts}")
        work = kw.moe(tokens, hidden, inter, experts, topk)
        return self._cost(self.moe_table, (hidden, inter, experts, topk), (tokens,), work)

    @_sized
    def allreduce(self, message_bytes: int, gpus: int) -> TermCost:
        if gpus == 1:
            return ZERO  # nothing to reduce on one GPU
        work = (0.0, kw.allreduce_traffic(message_bytes, gpus))
        return self._cost(self.allreduce_table, (gpus,), (message_bytes,), work)


KERNEL_TIMES: dict[str, MeasuredKernels] = {name: MeasuredKernels(gpu) for name, gpu in GPUS.items()}


def kernel_times(name: str) -> MeasuredKernels:
    """The measured `KernelTimes` of a GPU by name (``h100``, ``h200``); tables load on first use."""
    found = KERNEL_TIMES.get(name)
    if found is None:
        known = ", ".join(sorted(KERNEL_TIMES))
        raise KernelTablesError(f"no measured kernel tables for GPU {name!r} (known: {known})")
    return found
