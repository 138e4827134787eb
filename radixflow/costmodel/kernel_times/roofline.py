"""`RooflineKernels`: a `KernelTimes` from a GPU's datasheet, for GPUs without measured tables.

Each kernel call takes the longer of its FLOPs at a stated fraction of the dense BF16 peak and its
bytes at the datasheet memory bandwidth. The fractions are those the measured H200 tables show for
the nearest kernel class (the aiconfigurator-core 0.12.0 vLLM tables); where no
class was measured (Mamba2, LFM2's short conv) the source says which class stands in. A roofline
is a lower bound: no launch latency, no tile quantization, no partial waves. Every term's source
says `roofline: ...` and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from radixflow.costmodel.kernel_times.contract import TermCost
from radixflow.costmodel.shape.model_shape import expected_experts

BF16 = 2  # bytes per weight, activation and KV element
STATE = 4  # recurrent state is float32 (costmodel.shape.mixer_shapes.STATE_BYTES)

# Fractions of the dense peak, each from the nearest measured kernel class on H200 (bf16).
GEMM_EFFICIENCY = 0.80
WHY_GEMM = (
    "GEMMs measured on H200 with m, n and k all >= 2048 run at 72-84% of peak (10th to 90th "
    "percentile, median 79%)"
)
ATTENTION_EFFICIENCY = 0.50
WHY_ATTENTION = "prefill attention measured on H200 at 40% (2k tokens) to 59% (8k) of peak"
WHY_DECODE = "decode attention measured on H200 reads its KV at ~91% of the datasheet bandwidth"
# Read on this module's own FLOP count (8 per state element and token, plus the conv): the earlier
# 11% (~100-110 TFLOP/s) was the delta-rule kernel alone on `kernel_work`'s larger count, so the
# roofline ran recurrent mixers ~1.6x faster than measured.
RECURRENT_EFFICIENCY = 0.07
WHY_GDN = (
    "Gated DeltaNet prefill (conv + chunked delta rule) measured on H200 at ~7% of peak on these "
    "FLOPs for one 4k-8k-token request of Qwen3-Next's shape (32 value heads); its time barely "
    "moves with the head count: ~3.5% at 16 value heads, ~12% at 64"
)
WHY_MAMBA2 = "no Mamba2 scan measured: the rate of Gated DeltaNet's chunked prefill, the nearest class"
ELEMENTWISE_EFFICIENCY = 0.10
WHY_CONV = "no short conv measured: elementwise, ~1 FLOP per byte, so its bytes bind, never this fraction"
WHY_MOE = "no grouped-expert rate assumed apart: the dense GEMM fraction, weights of the experts touched"
# All-reduce over NVLink: H100/H200 SXM have 900 GB/s of NVLink per GPU, 450 GB/s each way.
LINK_BANDWIDTH = 450e9
ALLREDUCE_LATENCY_S = 5e-6
WHY_ALLREDUCE = (
    "ring all-reduce, 2(g-1)/g of the message each way at 450 GB/s (NVLink 4, 900 GB/s per GPU, "
    "datasheet) plus 5 us per call (the shipped H100/H200 tables time a message of at most 4 KB "
    "at 4.2-5.6 us on 2-8 GPUs; their largest, 512 MB, move at 165-235 GB/s, under this bound)"
)


class Datasheet(Protocol):
    """The figures a roofline reads off a GPU (a `HardwareProfile` is one): kernel times sit below
    the hardware profiles, which name their source in the kernel-time registry."""

    @property
    def name(self) -> str: ...

    @property
    def flops(self) -> float: ...

    @property
    def bandwidth(self) -> float | None: ...

    @property
    def memory_bytes(self) -> float | None: ...


@dataclass(frozen=True)
class RooflineKernels:
    """Kernel times of one GPU from its peak FLOP/s and memory bandwidth (pure arithmetic)."""

    name: str
    peak_flops: float  # dense BF16 FLOP/s
    bandwidth: float  # bytes/s (inf: memory time not modelled)
    memory_bytes: float  # one GPU's memory (inf: no limit, never tensor parallel)
    link_bandwidth: float = LINK_BANDWIDTH

    @classmethod
    def from_profile(cls, profile: Datasheet) -> RooflineKernels:
        """The roofline of a profile's ``flops`` (its peak) and ``bandwidth`` (None: no memory
        time) with ``memory_bytes`` of memory (None: unlimited)."""
        return cls(
            profile.name,
            profile.flops,
            profile.bandwidth or math.inf,
            profile.memory_bytes or math.inf,
        )

    def _term(self, flops: float, bytes_: float, efficiency: float, why: str) -> TermCost:
        seconds = max(flops / (efficiency * self.peak_flops), bytes_ / self.bandwidth)
        rate = f"{efficiency:.0%} of {self.peak_flops / 1e12:g} TFLOP/s"
        memory = f"{self.bandwidth / 1e12:g} TB/s" if math.isfinite(self.bandwidth) else "no memory time"
        return TermCost(seconds, flops, bytes_, f"roofline: FLOPs at {rate} ({why}) or bytes at {memory}")

    def gemm(self, m: int, n: int, k: int) -> TermCost:
        flops = 2.0 * m * n * k
        return self._term(flops, BF16 * (n * k + m * k + m * n), GEMM_EFFICIENCY, WHY_GEMM)

    def prefill_attention(
        self, tokens: int, context: int, heads: int, kv_heads: int, head_dim: int, batch: int = 1
    ) -> TermCost:
        # queries at positions context - tokens .. context - 1 attend causally over p + 1 keys
        attended = batch * tokens * (2 * context - tokens + 1) / 2
        flops = 4.0 * heads * head_dim * attended
        per_sequence = 2 * tokens * heads + 2 * context * kv_heads + 2 * tokens * kv_heads
        bytes_ = BF16 * head_dim * batch * per_sequence
        return self._term(flops, bytes_, ATTENTION_EFFICIENCY, WHY_ATTENTION)

    def decode_attention(
        self, batch: int, context: int, heads: int, kv_heads: int, head_dim: int
    ) -> TermCost:
        flops = 4.0 * batch * heads * head_dim * context
        bytes_ = BF16 * batch * head_dim * (2 * context * kv_heads + 2 * heads)
        return self._term(flops, bytes_, ATTENTION_EFFICIENCY, WHY_DECODE)

    def _recurrent(
        self, tokens: int, sequences: int, state: int, channels: int, conv: int, step: float, why: str
    ) -> TermCost:
        """A recurrent mixer over ``tokens`` tokens of ``sequences`` sequences: ``step`` FLOPs per
        state element per token, the conv over ``channels``, each sequence's state read and written."""
        flops = tokens * (step * state + 2.0 * conv * channels)
        io = tokens * 2 * channels * BF16  # the conv's input in, the mixer's output out (about)
        states = sequences * 2 * (state + (conv - 1) * channels) * STATE
        return self._term(flops, io + states, RECURRENT_EFFICIENCY, why)

    def gdn_prefill(
        self, tokens: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int, batch: int = 1
    ) -> TermCost:
        channels = 2 * k_heads * head_k + v_heads * head_v
        state = v_heads * head_k * head_v
        return self._recurrent(batch * tokens, batch, state, channels, conv, 8.0, WHY_GDN)

    def gdn_decode(
        self, batch: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int
    ) -> TermCost:
        channels = 2 * k_heads * head_k + v_heads * head_v
        return self._recurrent(batch, batch, v_heads * head_k * head_v, channels, conv, 8.0, WHY_GDN)

    def mamba2_prefill(
        self, tokens: int, heads: int, head_dim: int, state: int, groups: int, conv: int, batch: int = 1
    ) -> TermCost:
        inner = heads * head_dim
        channels = inner + 2 * groups * state
        return self._recurrent(batch * tokens, batch, inner * state, channels, conv, 6.0, WHY_MAMBA2)

    def mamba2_decode(
        self, batch: int, heads: int, head_dim: int, state: int, groups: int, conv: int
    ) -> TermCost:
        inner = heads * head_dim
        channels = inner + 2 * groups * state
        return self._recurrent(batch, batch, inner * state, channels, conv, 6.0, WHY_MAMBA2)

    def short_conv(self, tokens: int, channels: int, kernel: int) -> TermCost:
        flops = tokens * channels * (2.0 * kernel + 2.0)  # the taps and the two gates
        bytes_ = tokens * channels * 4 * BF16  # B, C and x in, the gated output out
        return self._term(flops, bytes_, ELEMENTWISE_EFFICIENCY, WHY_CONV)

    def moe(self, tokens: int, hidden: int, inter: int, experts: int, topk: int) -> TermCost:
        per_expert = 3 * hidden * inter  # gate, up and down
        flops = 2.0 * tokens * topk * per_expert
        weights = expected_experts(experts, topk, tokens) * per_expert * BF16
        activations = tokens * topk * (2 * hidden + 3 * inter) * BF16
        return self._term(flops, weights + activations, GEMM_EFFICIENCY, WHY_MOE)

    def allreduce(self, message_bytes: int, gpus: int) -> TermCost:
        source = f"roofline: {WHY_ALLREDUCE}"
        if gpus <= 1:
            return TermCost(0.0, 0.0, 0.0, source)
        moved = 2.0 * (gpus - 1) / gpus * message_bytes
        return TermCost(ALLREDUCE_LATENCY_S + moved / self.link_bandwidth, 0.0, moved, source)
