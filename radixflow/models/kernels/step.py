"""One-token recurrent steps for a batch of decode rows (float32 state).

Each function advances ``S`` independent sequences by one token: the depthwise conv window
shift shared by every hybrid (Gated DeltaNet, Mamba2, LFM2's short conv) and the closed-form
gated delta rule (no triangular solve: one token has nothing to solve jointly). Mamba2's
single-token recurrence is `radixflow.models.kernels.ssd.ssd_step`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from radixflow.models.kernels.delta_rule import expand_key_heads, l2norm

# Bytes of recurrent state per block of rows in the batched steps (`row_blocks`). Chosen as half
# of what was read as a 2 MiB L2 per core; on the machine it was tuned on (AMD EPYC, Zen 4) a
# core's L2 is 1 MiB (sysfs cpu0/cache/index2; lscpu's "2 MiB (2 instances)" is both cores'
# total), so a block fills it and spills to the shared 32 MiB L3; not re-tuned since. Only speed
# depends on it: each row's arithmetic is the same for any block size.
BLOCK_BYTES = 1 << 20


def conv_step(
    x: torch.Tensor,
    window: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv of one new input per row, before any activation.

    ``x``: ``[S, C]``; ``window``: ``[S, C, K-1]`` (the previous K-1 inputs, oldest first);
    ``weight``: ``[C, K]``. Returns ``(out [S, C], new window [S, C, K-1])``, the new window
    being the old one shifted left by the new input. ``window`` is left alone unless
    ``in_place``: then it is shifted where it lies (in its own dtype) and returned, so a window
    held in the state pool needs no copy back.
    """
    taps_in, weight = window.to(x.dtype), weight.to(x.dtype)
    # One multiply-add per tap, oldest first, instead of building the [S, C, K] window and
    # reducing its short last dimension: faster on CPU (and equal to the bit to that reduction,
    # which also adds the taps oldest first).
    taps = weight.shape[-1]
    out = taps_in[..., 0] * weight[:, 0] if taps > 1 else x * weight[:, 0]
    for j in range(1, taps - 1):
        out += taps_in[..., j] * weight[:, j]
    if taps > 1:
        out += x * weight[:, taps - 1]
    if bias is not None:
        out = out + bias.to(x.dtype)
    if taps == 1:  # no window to shift
        return out, window
    if not in_place:
        return out, torch.cat([taps_in[..., 1:], x.unsqueeze(-1)], dim=-1)
    # column by column, oldest first: each column is read before it is overwritten (a copy of
    # overlapping slices in one call is refused)
    for j in range(taps - 2):
        window[..., j].copy_(window[..., j + 1])
    window[..., -1].copy_(x)
    return out, window


def gated_delta_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule per row, in float32.

    ``q``/``k``: ``[S, H, dk]`` (normalised, q already scaled), ``v``: ``[S, H, dv]``,
    ``g``/``beta``: ``[S, H]``, ``state``: ``[S, H, dk, dv]`` (contiguous). Per row and head:
    ``S <- exp(g) S``; ``u = beta (v - S^T k)``; ``S <- S + k u^T``; ``o = S^T q``.
    Returns ``(o [S, H, dv], new state)``. ``state`` is left alone unless ``in_place``: then the
    new state is written into it (for a state the caller owns, such as a gathered copy). The state
    is the large operand, so it is touched in three passes: one batched matmul reads both the
    recall ``S^T k`` and the readout ``S^T q`` from the old state (``o = exp(g) S^T q + (k.q) u``
    equals the readout of the new state), then the decay and the rank-1 update, block of rows by
    block (`row_blocks`).
    """
    rows, heads, dk = k.shape
    dv = v.shape[-1]
    decay = g.exp().unsqueeze(-1)  # [S, H, 1]
    # per row and head, before the blocks: u = beta v - (beta exp(g)) S^T k needs one op a block
    gain = beta.unsqueeze(-1)
    scaled_v, scaled_decay = gain * v, gain * decay
    keys_queries = torch.stack([k, q], dim=2).view(rows * heads, 2, dk)
    dot = (k * q).sum(-1, keepdim=True)
    new = state if in_place else torch.empty_like(state)
    out = torch.empty(rows, heads, dv, dtype=v.dtype, device=v.device)
    flat, flat_new = state.view(rows * heads, dk, dv), new.view(rows * heads, dk, dv)
    decay_flat = decay.view(rows * heads, 1, 1)
    for b in row_blocks(rows, state.stride(0) * state.element_size()):
        h = slice(b.start * heads, b.stop * heads)  # the block's (row, head) pairs
        read = torch.bmm(keys_queries[h], flat[h]).view(-1, heads, 2, dv)  # S^T k, S^T q
        u = torch.addcmul(scaled_v[b], scaled_decay[b], read[:, :, 0], value=-1)
        torch.addcmul(decay[b] * read[:, :, 1], dot[b], u, out=out[b])
        block = torch.mul(flat[h], decay_flat[h], out=flat_new[h])
        block.baddbmm_(k.view(rows * heads, dk, 1)[h], u.view(-1, 1, dv))
    return out, new


def delta_heads(
    mixed: torch.Tensor, key_heads: int, heads: int, dk: int, dv: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Post-conv ``[L, 2 key_heads dk + heads dv]`` -> float32 q, k (l2-normalised, q scaled by
    ``dk^-1/2``, each key head serving ``heads / key_heads`` consecutive value heads), v."""
    q, k, v = delta_key_heads(mixed, key_heads, heads, dk, dv)
    return expand_key_heads(q, heads), expand_key_heads(k, heads), v


def delta_key_heads(
    mixed: torch.Tensor, key_heads: int, heads: int, dk: int, dv: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`delta_heads` before the key heads are repeated: q, k ``[L, key_heads, dk]``, v ``[L,
    heads, dv]`` (the native kernels read key head ``h / (heads / key_heads)`` for value head h)."""
    length, key_dim = mixed.shape[0], key_heads * dk
    q, k, v = mixed.float().split([key_dim, key_dim, heads * dv], dim=-1)
    q = l2norm(q.reshape(length, key_heads, dk)) * dk**-0.5
    k = l2norm(k.reshape(length, key_heads, dk))
    return q, k, v.reshape(length, heads, dv)


def delta_gates(
    b: torch.Tensor, a: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule's gates from the raw projections ``b``, ``a [T, H]``: ``(beta, g)`` in
    float32, ``beta = sigmoid(b)``, ``g = -exp(a_log) softplus(a + dt_bias)``."""
    beta = torch.sigmoid(b.float())
    return beta, -a_log.float().exp() * F.softplus(a.float() + dt_bias.float())


def deltanet_decode(
    qkv: torch.Tensor,
    window: torch.Tensor,
    weight: torch.Tensor,
    key_heads: int,
    dk: int,
    gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A Gated DeltaNet decode step from the projections to the heads' readout: the conv step
    (``weight [C, K]``, no bias; ``window`` shifted in place), silu, `delta_heads`, the gates
    from ``(b, a, a_log, dt_bias)`` (`delta_gates`), then `gated_delta_step` (``state [S, H, dk,
    dv]`` updated in place). Returns ``(o [S, H, dv], state)``."""
    heads, dv = state.shape[1], state.shape[3]
    beta, g = delta_gates(*gates)
    mixed, _ = conv_step(qkv, window, weight, None, in_place=True)
    q, k, v = delta_heads(F.silu(mixed), key_heads, heads, dk, dv)
    return gated_delta_step(q, k, v, g, beta, state, in_place=True)


@dataclass(frozen=True)
class NormSpec:
    """An RMSNorm's constants: ``eps``, ``offset`` (1: the zero-centred ``1 + w`` weight) and
    ``cast_first``: the normed value is cast to the input's dtype and multiplied by the weight
    there (transformers' Llama, Qwen3, LFM2 and Falcon-H1), else the product is taken in float32
    and cast (Nemotron-H and the ``1 + w`` norms). In float32 the two orders agree to the bit; in
    bfloat16 they are one rounding apart."""

    eps: float
    offset: float = 0.0
    cast_first: bool = False

    def __post_init__(self) -> None:
        if self.offset and self.cast_first:
            raise ValueError("a cast_first norm has a plain weight (offset 0)")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, spec: NormSpec) -> torch.Tensor:
    """RMSNorm over the last dim computed in float32, times ``offset + weight``, in the order
    ``spec`` says (`NormSpec`), returned in ``x``'s dtype."""
    # the temporaries are this call's own, so the steps after the first write in place
    # (fewer allocations, the same arithmetic in the same order)
    h = x.float()
    h = h * h.pow(2).mean(-1, keepdim=True).add_(spec.eps).rsqrt_()
    if spec.cast_first:
        h = h.to(x.dtype)
        return h.mul_(weight) if h.dtype == weight.dtype else (weight * h).to(x.dtype)
    weight = weight.float()
    if spec.offset:
        weight = spec.offset + weight
    return h.mul_(weight).to(x.dtype)


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim (plain ``w``, not ``1 + w``) times ``silu(gate)``, computed in
    float32 and returned in ``x``'s dtype (the Gated DeltaNet output norm)."""
    dtype = x.dtype
    h = x.float()
    h = (h * h.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()).to(dtype)
    # temporaries of this call's own from here: in place, same arithmetic in the same order
    h = h.mul_(weight) if h.dtype == weight.dtype else weight * h
    return h.mul_(F.silu(gate.float())).to(dtype)


def row_blocks(rows: int, row_bytes: int) -> list[slice]:
    """Slices of ``rows`` state rows of about `BLOCK_BYTES` each (at least one row per block).

    The batched steps read, decay and update the state block by block instead of each pass over
    every row: a block stays in the core's L2 cache between its passes, so the state is read from
    memory once per step rather than once per pass. Each row's arithmetic is unchanged.
    """
    per = max(1, BLOCK_BYTES // max(1, row_bytes))
    return [slice(i, min(i + per, rows)) for i in range(0, rows, per)]


def kv_write(
    kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """The new tokens' K and V (``[T, kv_heads, dim]``) into pool rows ``slots`` of ``kc``, ``vc``
    (mutates them; each token its own slot)."""
    kc.index_copy_(0, slots, k.to(kc.dtype))
    vc.index_copy_(0, slots, v.to(vc.dtype))


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (rotate-half) of the first ``rot`` dims of each head: ``x [T, heads,
    head_dim]``, ``cos``/``sin [T, 1, rot]`` (`layers.Rotary` tables) -> a new tensor; the dims
    past ``rot`` pass through."""
    rot = cos.shape[-1]
    half = rot // 2
    if rot == x.shape[-1]:  # the whole head: no pass-through part to append
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (x * cos).add_(rotated.mul_(sin))
    part, rest = x[..., :rot], x[..., rot:]
    rotated = torch.cat([-part[..., half:], part[..., :half]], dim=-1)
    return torch.cat([(part * cos).add_(rotated.mul_(sin)), rest], dim=-1)
