"""The work of one kernel call, (FLOPs, bytes), and its roofline time on a GPU.

These counts do two jobs: every `TermCost` reports them, and they carry a measured efficiency
(roofline time / measured time) from a measured shape to a nearby unmeasured one, or along an
axis past the end of a table. They count what the kernel must do, not what a particular
implementation does: bf16 activations, weights and KV (2 bytes), fp32 recurrent state where
vLLM keeps it in fp32 (Gated DeltaNet: counted in fp32, its measured decode step moves the
state at ~85% of the H200's bandwidth; counted in bf16 it would be ~42%, too low for a kernel
that only streams the state).
"""

from __future__ import annotations

from dataclasses import dataclass

BF16 = 2.0  # bytes per weight, activation and KV element
FP32 = 4.0
GDN_CHUNK = 64  # tokens per chunk of the chunked delta rule (flashinfer / fla)
# tokens per chunk of Mamba2's chunked SSD scan: vLLM runs the model config's own, and
# NemotronHConfig's chunk_size and the Falcon-H1 checkpoints' mamba_chunk_size are 128
# (transformers' FalconH1Config default is 256)
SSD_CHUNK = 128

Work = tuple[float, float]  # (FLOPs, bytes moved to or from device memory)


@dataclass(frozen=True)
class Roofline:
    """The floor a kernel cannot beat: its FLOPs at the peak rate or its bytes at the bandwidth."""

    peak_flops: float
    bandwidth: float

    def time(self, work: Work) -> float:
        flops, nbytes = work
        return max(flops / self.peak_flops, nbytes / self.bandwidth)


def gemm(m: float, n: float, k: float) -> Work:
    return 2.0 * m * n * k, BF16 * (m * k + k * n + m * n)


def prefill_attention(
    batch: float, tokens: float, context: float, heads: int, kv_heads: int, head_dim: int
) -> Work:
    """``tokens`` causal queries per sequence over ``context`` keys (the chunk is the last
    ``tokens`` of them): QK^T and PV over tokens*context - tokens^2/2 query-key pairs."""
    pairs = tokens * context - tokens * tokens / 2.0
    flops = 4.0 * batch * heads * head_dim * pairs
    nbytes = BF16 * batch * head_dim * (2.0 * tokens * heads + 2.0 * context * kv_heads)
    return flops, nbytes


def decode_attention(batch: float, context: float, heads: int, kv_heads: int, head_dim: int) -> Work:
    flops = 4.0 * batch * heads * head_dim * context
    nbytes = BF16 * batch * head_dim * (2.0 * context * kv_heads + 2.0 * heads)
    return flops, nbytes


def depthwise_conv(tokens: float, channels: int, kernel: int, state_tokens: float = 0.0) -> Work:
    """A causal depthwise convolution over ``tokens`` tokens: reads and writes every channel of
    every token, plus ``state_tokens`` tokens of rolling conv state read and written."""
    flops = 2.0 * tokens * channels * kernel
    nbytes = BF16 * channels * (2.0 * tokens + 2.0 * state_tokens)
    return flops, nbytes


def gdn_channels(k_heads: int, v_heads: int, head_k: int, head_v: int) -> int:
    """Channels of a GDN layer's short conv (q, k and v are convolved)."""
    return 2 * k_heads * head_k + v_heads * head_v


def gdn_rule_prefill(
    batch: float, tokens: float, k_heads: int, v_heads: int, head_k: int, head_v: int
) -> Work:
    """Chunked delta rule per token and value head: q.S, the rank-1 state updates (as WY
    products) and the intra-chunk attention; reads q, k, v, gates; writes o and the fp32 state."""
    per_token = v_heads * (6.0 * head_k * head_v + 2.0 * GDN_CHUNK * (2.0 * head_k + head_v))
    flops = batch * tokens * per_token
    io = 2.0 * k_heads * head_k + 2.0 * v_heads * head_v + 2.0 * v_heads
    nbytes = BF16 * batch * tokens * io + FP32 * batch * v_heads * head_k * head_v
    return flops, nbytes


def gdn_rule_decode(batch: float, k_heads: int, v_heads: int, head_k: int, head_v: int) -> Work:
    """One recurrent step per sequence: the fp32 state is read and written once."""
    flops = batch * v_heads * 6.0 * head_k * head_v
    io = 2.0 * k_heads * head_k + 2.0 * v_heads * head_v + 2.0 * v_heads
    nbytes = 2.0 * FP32 * batch * v_heads * head_k * head_v + BF16 * batch * io
    return flops, nbytes


def mamba2_channels(heads: int, head_dim: int, state: int, groups: int) -> int:
    """Channels of a Mamba2 layer's conv (x, B and C are convolved)."""
    return heads * head_dim + 2 * groups * state


def mamba2_scan(batch: float, tokens: float, heads: int, head_dim: int, state: int, groups: int) -> Work:
    """Chunked SSD over ``batch`` sequences of ``tokens`` each, per token: C.B^T within the chunk
    (per group), the intra-chunk output, the state's contribution to the output and the state
    update; reads x, B, C, dt; writes y and each sequence's final state (bf16, vLLM's default for
    Mamba2), as `gdn_rule_prefill` writes each sequence's."""
    n = batch * tokens
    flops = n * (
        heads * (4.0 * head_dim * state + 2.0 * SSD_CHUNK * head_dim) + groups * 2.0 * SSD_CHUNK * state
    )
    io = 2.0 * heads * head_dim + 2.0 * groups * state + heads
    nbytes = BF16 * n * io + BF16 * batch * heads * head_dim * state
    return flops, nbytes


def mamba2_state_update(batch: float, heads: int, head_dim: int, state: int, groups: int) -> Work:
    """One selective-state-update step per sequence: the state is read and written once."""
    flops = batch * heads * head_dim * state * 6.0
    io = 2.0 * heads * head_dim + 2.0 * groups * state + heads
    nbytes = 2.0 * BF16 * batch * heads * head_dim * state + BF16 * batch * io
    return flops, nbytes


def short_conv(tokens: float, channels: int, kernel: int) -> Work:
    """LFM2's gated short conv: y = C * conv(B * x); reads B, C, x, writes y (the projections
    producing B, C, x and consuming y are GEMMs)."""
    flops = tokens * channels * (2.0 * kernel + 2.0)
    nbytes = BF16 * tokens * channels * 4.0
    return flops, nbytes


def moe(tokens: float, hidden: int, inter: int, experts: int, topk: int) -> Work:
    """Gated experts (gate, up, down: three hidden x inter matrices) for tokens * topk routed
    tokens; the weights read are those of the experts touched, min(experts, tokens * topk)."""
    routed = tokens * topk
    flops = 2.0 * routed * 3.0 * hidden * inter
    touched = min(float(experts), routed)
    nbytes = BF16 * (touched * 3.0 * hidden * inter + 2.0 * tokens * hidden + 2.0 * routed * inter)
    return flops, nbytes


def allreduce_traffic(message_bytes: float, gpus: int) -> float:
    """Bytes each GPU sends in a bandwidth-optimal all-reduce: 2 (g - 1) / g of the message."""
    return 2.0 * (gpus - 1) / gpus * message_bytes
