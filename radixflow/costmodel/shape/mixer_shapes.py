"""Sequence mixers of a hybrid model: their projections and the work one chunk does in each.

Pure arithmetic over shapes: no torch, no timing. Attention, Gated DeltaNet, Mamba2 and LFM2's
short conv each say what weights they hold (as `Projection`s, split under tensor parallelism),
the FLOPs of their sequence mixing for a chunk, and the state or KV they keep. FLOP counts are the
standard 2·(multiply-adds) of each matmul; recurrent mixing is counted in its recurrent form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from radixflow.costmodel.shape.chunk import ChunkShape

# Recurrent (and conv) state in float32, as every torch family here keeps it. For the GPU profiles
# an assumption: vLLM keeps both in the model's dtype unless --mamba-cache-dtype /
# --mamba-ssm-cache-dtype say float32 (MambaStateDtypeCalculator, "auto" = the model's dtype).
STATE_BYTES = 4


@dataclass(frozen=True)
class Projection:
    """One weight matrix: ``k`` inputs to ``n`` outputs. Under tensor parallelism a ``column``
    projection splits its outputs across GPUs and a ``row`` projection its inputs (Megatron)."""

    n: int
    k: int
    split: Literal["column", "row", "none"] = "column"

    @property
    def params(self) -> int:
        return self.n * self.k


def projection_params(projections: tuple[Projection, ...]) -> int:
    return sum(p.params for p in projections)


class Mixer(Protocol):
    kind: str  # cost term the sequence mixing is charged to (projections are "matmul")

    def projections(self, hidden: int) -> tuple[Projection, ...]:
        """The mixer's weight matrices, in then out (every one active per token). Pure."""
        ...

    def params(self, hidden: int) -> int:
        """Weights of the mixer's projections (active per token). Pure."""
        ...

    def mix_flops(self, chunk: ChunkShape) -> float:
        """FLOPs of the sequence mixing itself (beyond the projections) for ``chunk``. Pure."""
        ...

    def prefix_flops(self, chunk: ChunkShape) -> float:
        """The part of `mix_flops` that reads ``chunk``'s cached prefix: charged to its own term
        (``prefix_attention``), since attention over cached KV runs apart from the causal
        attention inside the chunk and costs another rate per FLOP; 0 where a recurrent state
        carries the prefix. Pure."""
        ...

    def state_bytes(self) -> int:
        """Bytes of one sequence's recurrent state in this layer (0 for attention). Pure."""
        ...

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token occupies in this layer (0 for recurrent mixers). Pure."""
        ...


@dataclass(frozen=True)
class Attention:
    heads: int
    kv_heads: int
    head_dim: int
    gated: bool = False  # Qwen3.5/Qwen3-Next: q_proj also emits a per-head output gate
    kind: str = "attention"

    def projections(self, hidden: int) -> tuple[Projection, ...]:
        q = self.heads * self.head_dim * (2 if self.gated else 1)
        qkv = Projection(q + 2 * self.kv_heads * self.head_dim, hidden)
        return qkv, Projection(hidden, self.heads * self.head_dim, "row")

    def params(self, hidden: int) -> int:
        return projection_params(self.projections(hidden))

    def mix_flops(self, chunk: ChunkShape) -> float:
        """QK^T and PV: each new token at position p attends causally over p + 1 tokens (so the
        cost grows with the cached prefix the chunk reads)."""
        attended = chunk.length * (chunk.start + chunk.end + 1) / 2
        return 4.0 * self.heads * self.head_dim * attended

    def prefix_flops(self, chunk: ChunkShape) -> float:
        return 4.0 * self.heads * self.head_dim * chunk.length * chunk.start

    def state_bytes(self) -> int:
        return 0

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class GatedDeltaNet:
    k_heads: int
    v_heads: int
    k_dim: int
    v_dim: int
    conv_kernel: int = 4
    kind: str = "gdn"

    def _conv_channels(self) -> int:
        return 2 * self.k_heads * self.k_dim + self.v_heads * self.v_dim

    def projections(self, hidden: int) -> tuple[Projection, ...]:
        # q, k, v and the output gate z in; per-head beta and decay; out projection
        qkvz = 2 * self.k_heads * self.k_dim + 2 * self.v_heads * self.v_dim
        out = Projection(hidden, self.v_heads * self.v_dim, "row")
        return Projection(qkvz + 2 * self.v_heads, hidden), out

    def params(self, hidden: int) -> int:
        return projection_params(self.projections(hidden))

    def mix_flops(self, chunk: ChunkShape) -> float:
        # per token and head: S k, rank-1 delta update with decay, S^T q over a k_dim x v_dim state
        state = self.v_heads * self.k_dim * self.v_dim
        return chunk.length * (8.0 * state + 2.0 * self.conv_kernel * self._conv_channels())

    def prefix_flops(self, chunk: ChunkShape) -> float:
        return 0.0  # the recurrent state carries the prefix

    def state_bytes(self) -> int:
        conv = (self.conv_kernel - 1) * self._conv_channels()
        return (self.v_heads * self.k_dim * self.v_dim + conv) * STATE_BYTES

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 0


@dataclass(frozen=True)
class Mamba2:
    heads: int
    head_dim: int
    d_state: int
    groups: int
    conv_kernel: int = 4
    kind: str = "mamba2"

    @property
    def d_inner(self) -> int:
        return self.heads * self.head_dim

    def _conv_channels(self) -> int:
        return self.d_inner + 2 * self.groups * self.d_state

    def projections(self, hidden: int) -> tuple[Projection, ...]:
        # in_proj emits z, x, B, C and dt; out_proj maps d_inner back
        width = 2 * self.d_inner + 2 * self.groups * self.d_state + self.heads
        return Projection(width, hidden), Projection(hidden, self.d_inner, "row")

    def params(self, hidden: int) -> int:
        return projection_params(self.projections(hidden))

    def mix_flops(self, chunk: ChunkShape) -> float:
        # recurrent form: decay, input outer product and output contraction over d_inner x d_state
        conv = 2.0 * self.conv_kernel * self._conv_channels()
        return chunk.length * (6.0 * self.d_inner * self.d_state + conv)

    def prefix_flops(self, chunk: ChunkShape) -> float:
        return 0.0  # the recurrent state carries the prefix

    def state_bytes(self) -> int:
        conv = (self.conv_kernel - 1) * self._conv_channels()
        return (self.d_inner * self.d_state + conv) * STATE_BYTES

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 0


@dataclass(frozen=True)
class ShortConv:
    """LFM2's gated short convolution: in_proj to B, C, x; causal conv over L_cache taps; out_proj."""

    channels: int  # the model's hidden size
    kernel: int = 3
    kind: str = "conv"

    def projections(self, hidden: int) -> tuple[Projection, ...]:
        return Projection(3 * self.channels, hidden), Projection(hidden, self.channels, "row")

    def params(self, hidden: int) -> int:
        return projection_params(self.projections(hidden))

    def mix_flops(self, chunk: ChunkShape) -> float:
        return chunk.length * 2.0 * self.kernel * self.channels

    def prefix_flops(self, chunk: ChunkShape) -> float:
        return 0.0  # the recurrent state carries the prefix

    def state_bytes(self) -> int:
        return (self.kernel - 1) * self.channels * STATE_BYTES

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 0
