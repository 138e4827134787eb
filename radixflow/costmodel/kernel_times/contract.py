"""What one kernel call costs on one GPU: the contract between the GPU cost model and its sources.

A `KernelTimes` answers, for a kernel class and its shape, how long one call takes on one GPU
(bf16 weights and activations, bf16 KV cache) and where that figure comes from: a measured table
(`measured: <table>`, interpolated as the measurements allow) or a roofline with a stated
efficiency (`roofline: <why>`) where nothing was measured. The GPU cost model walks a round's
layers and chunks and asks one of these for every term; tensor parallelism is the caller's
business (it passes each GPU's share of heads, columns and experts, and asks for the all-reduce).

Pure Python: no torch, no pandas; tables are read from files shipped with the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class TermCost:
    """One term of a worker call: its time, the work it does, and the source of the time."""

    seconds: float
    flops: float
    bytes: float  # bytes moved to or from device memory
    source: str  # "measured: h200_sxm/gemm/vllm/0.24.0 (…)" or "roofline: …"

    def __add__(self, other: TermCost) -> TermCost:
        """Two calls of the same term (each distinct source named once, in order)."""
        parts = self.source.split(SEPARATOR) if self.source else []
        if other.source:
            parts += [p for p in other.source.split(SEPARATOR) if p not in parts]
        source = SEPARATOR.join(parts)
        return TermCost(
            self.seconds + other.seconds, self.flops + other.flops, self.bytes + other.bytes, source
        )


SEPARATOR = "; "  # between the distinct sources of a summed term (a single source never holds it)
ZERO = TermCost(0.0, 0.0, 0.0, "")


class KernelTimes(Protocol):
    """Seconds of one kernel call on one GPU. Every method is pure (reads its tables only)."""

    name: str  # the GPU, e.g. "h200"
    memory_bytes: float  # device memory of one GPU
    bandwidth: float  # bytes/s of device memory (for rooflines and weight reads)

    def gemm(self, m: int, n: int, k: int) -> TermCost:
        """``[m, k] @ [k, n]``: m tokens through a weight of k inputs and n outputs."""
        ...

    def prefill_attention(
        self, tokens: int, context: int, heads: int, kv_heads: int, head_dim: int, batch: int = 1
    ) -> TermCost:
        """``batch`` sequences' chunks in one call, each ``tokens`` new queries attending causally
        over ``context`` keys (its cached prefix plus the chunk; ``context >= tokens``). Pass
        ``batch`` positionally."""
        ...

    def decode_attention(
        self, batch: int, context: int, heads: int, kv_heads: int, head_dim: int
    ) -> TermCost:
        """``batch`` sequences of one new token each, attending over ``context`` keys each."""
        ...

    def gdn_prefill(
        self, tokens: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int, batch: int = 1
    ) -> TermCost:
        """A Gated DeltaNet layer's sequence mixing (short conv + chunked delta rule) over
        ``batch`` sequences' chunks of ``tokens`` each, in one call (projections excluded: they
        are GEMMs). Pass ``batch`` positionally."""
        ...

    def gdn_decode(
        self, batch: int, k_heads: int, v_heads: int, head_k: int, head_v: int, conv: int
    ) -> TermCost:
        """The same for ``batch`` sequences of one token each (conv update + recurrent step)."""
        ...

    def mamba2_prefill(
        self, tokens: int, heads: int, head_dim: int, state: int, groups: int, conv: int, batch: int = 1
    ) -> TermCost:
        """A Mamba2 layer's sequence mixing (conv + chunked SSD scan) over ``batch`` sequences'
        chunks of ``tokens`` each, in one call. Pass ``batch`` positionally."""
        ...

    def mamba2_decode(
        self, batch: int, heads: int, head_dim: int, state: int, groups: int, conv: int
    ) -> TermCost:
        """The same for ``batch`` sequences of one token each (conv update + state update)."""
        ...

    def short_conv(self, tokens: int, channels: int, kernel: int) -> TermCost:
        """LFM2's gated short convolution over ``tokens`` tokens of ``channels`` channels."""
        ...

    def moe(self, tokens: int, hidden: int, inter: int, experts: int, topk: int) -> TermCost:
        """A routed-experts MLP over ``tokens`` tokens (gate/up and down of the experts they
        touch; the router and any shared expert are GEMMs)."""
        ...

    def allreduce(self, message_bytes: int, gpus: int) -> TermCost:
        """One all-reduce of ``message_bytes`` across ``gpus`` GPUs (tensor parallelism)."""
        ...
