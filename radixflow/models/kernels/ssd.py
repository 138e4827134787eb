"""Mamba2 math: pure functions on one segment of one sequence (or one decode step of a batch).

    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T;   y_t = h_t C_t   (the D skip is the caller's)

Long segments use the chunked SSD (matrix) form, `ssd_chunked`: quadratic attention-like work
inside chunks, a linear recurrence of the small state across chunks. Single tokens use the plain
recurrence, `ssd_step`. `mamba2_segments` runs a wave's prefill segments through them (the eager
reference of the native token-by-token scan). `causal_conv` is the depthwise conv in front of the scan and
`gated_rms_norm` the grouped, ``silu(z)``-gated norm behind it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from radixflow.models.kernels.delta_rule import Segments
from radixflow.models.kernels.step import conv_step, row_blocks


def causal_conv(
    xbc: torch.Tensor, window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv over ``xbc [L, C]`` continuing from ``window [C, K-1]``.

    ``weight`` is ``[C, K]``. Returns the conv output ``[L, C]`` (before the activation) and the
    new window: the last ``K-1`` inputs, which may reach back into the old window when ``L`` is
    shorter than it.
    """
    k = weight.shape[1]
    full = torch.cat([window.to(xbc.dtype), xbc.t()], dim=1)  # [C, K-1+L]
    # one depthwise conv1d call (the oneDNN kernel transformers' nn.Conv1d also runs): far less
    # CPU time than K shifted multiply-adds over [L, C]
    out = F.conv1d(full.unsqueeze(0), weight.to(xbc.dtype).unsqueeze(1), _as(bias, xbc), groups=full.shape[0])
    return out[0].t(), full[:, full.shape[1] - (k - 1) :]


def _as(bias: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if bias is None else bias.to(like.dtype)


def _segsum(a: torch.Tensor) -> torch.Tensor:
    """``out[..., l, s] = a[..., s+1] + ... + a[..., l]`` for ``l >= s``, ``-inf`` above.

    Summing the masked increments (instead of subtracting two cumulative sums) keeps the
    exponent exact even when the cumulative log-decay of a chunk is large.
    """
    q = a.shape[-1]
    strict = torch.ones(q, q, dtype=torch.bool, device=a.device).tril(-1)
    inc = a.unsqueeze(-1).expand(*a.shape, q).masked_fill(~strict, 0.0)  # inc[..., k, s] = a[k], k > s
    out = inc.cumsum(dim=-2)
    lower = torch.ones(q, q, dtype=torch.bool, device=a.device).tril(0)
    return out.masked_fill(~lower, float("-inf"))


def ssd_chunked(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    h0: torch.Tensor,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selective-state-space scan in chunked matrix form (float32 in, float32 out).

    ``x [L, H, P]``, ``dt [L, H]``, ``a [H]`` (negative), ``b``/``c [L, G, N]`` (head ``h`` reads
    group ``h // (H // G)``), ``h0 [H, P, N]``. Returns ``y [L, H, P]`` (without the D skip) and
    the state after the last token.
    """
    length, heads, p = x.shape
    if length == 0:  # no tokens: no output, state unchanged (callers never split off empty segments)
        return x.new_zeros(0, heads, p), h0
    groups, n = b.shape[1], b.shape[2]
    r = heads // groups
    q = min(chunk, length)
    nc = -(-length // q)
    pad = nc * q - length
    log_decay = dt * a  # [L, H]
    xdt = x * dt.unsqueeze(-1)
    if pad:
        # Padding tokens have dt = 0: no decay (exp(0) = 1) and no input, so the final state is
        # the state after the last real token.
        log_decay = F.pad(log_decay, (0, 0, 0, pad))
        xdt, b, c = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (xdt, b, c))
    log_decay = log_decay.view(nc, q, groups, r)
    xdt = xdt.view(nc, q, groups, r, p)
    b = b.view(nc, q, groups, n)
    c = c.view(nc, q, groups, n)
    cum = log_decay.cumsum(dim=1)  # [nc, Q, G, R]

    # Inside each chunk: y_l = sum_{s<=l} (C_l . B_s) exp(sum_{s<k<=l} a_k) dt_s x_s.
    decay = torch.exp(_segsum(log_decay.permute(0, 2, 3, 1)))  # [nc, G, R, l, s]
    scores = torch.einsum("clgn,csgn->cgls", c, b).unsqueeze(2) * decay
    y = torch.einsum("cgrls,csgrp->clgrp", scores, xdt)

    start, h = _carry_states(b, xdt, cum, h0.reshape(groups, r, p, n))
    y = y + torch.einsum("clgn,cgrpn->clgrp", c, start) * torch.exp(cum).unsqueeze(-1)
    return y.reshape(nc * q, heads, p)[:length], h.reshape(heads, p, n)


def _carry_states(
    b: torch.Tensor, xdt: torch.Tensor, cum: torch.Tensor, h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """State contributed by each chunk alone, then carried across chunks.

    ``b [nc, Q, G, N]``, ``xdt [nc, Q, G, R, P]``, ``cum [nc, Q, G, R]`` (in-chunk cumulative log
    decay), ``h [G, R, P, N]`` (state entering the first chunk). Returns the state entering each
    chunk ``[nc, G, R, P, N]`` and the state after the last one.
    """
    to_end = torch.exp(cum[:, -1:] - cum)  # decay from each token to its chunk's end
    chunk_states = torch.einsum("csgn,csgrp->cgrpn", b, xdt * to_end.unsqueeze(-1))
    chunk_decay = torch.exp(cum[:, -1])  # [nc, G, R]
    starts = []
    for i in range(cum.shape[0]):
        starts.append(h)
        h = chunk_decay[i][..., None, None] * h + chunk_states[i]
    return torch.stack(starts), h


def ssd_step(
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    h: torch.Tensor,
    *,
    in_place: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrence step for a batch: ``x [S, H, P]``, ``dt [S, H]``, ``b``/``c [S, G, N]``,
    ``h [S, H, P, N]`` (contiguous) -> ``y [S, H, P]`` (without the D skip) and the new state.

    ``h`` is left alone unless ``in_place``: then the new state is written into it (for a state
    the caller owns, such as a gathered copy) and returned. The state is the large operand, so it
    is touched in three passes (decay, rank-1 update, readout: batched matmuls over ``S H`` heads),
    block of rows by block (`row_blocks`).
    """
    s, heads, p = x.shape
    n = b.shape[2]
    r = heads // b.shape[1]
    xdt = (x * dt.unsqueeze(-1)).reshape(s, heads, p, 1)
    b_heads = b.repeat_interleave(r, dim=1).reshape(s, heads, 1, n)  # head h reads group h // r
    c_heads = c.repeat_interleave(r, dim=1).reshape(s, heads, n, 1)
    decay = torch.exp(dt * a)[..., None, None]
    new = h if in_place else torch.empty_like(h)
    y = torch.empty(s, heads, p, dtype=x.dtype, device=x.device)  # filled block by block
    for rows in row_blocks(s, h.stride(0) * h.element_size()):
        m = (rows.stop - rows.start) * heads
        block = torch.mul(h[rows], decay[rows], out=new[rows]).view(m, p, n)
        block.baddbmm_(xdt[rows].view(m, p, 1), b_heads[rows].view(m, 1, n))  # h += dt x B^T
        torch.bmm(block, c_heads[rows].view(m, n, 1), out=y[rows].view(m, p, 1))
    return y, new


def gated_rms_norm(
    y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, groups: int, eps: float, norm_before_gate: bool
) -> torch.Tensor:
    """RMSNorm over ``groups`` equal slices of the last dim, gated by ``silu(z)`` before or after.

    Computed in float32 (``y`` is the float32 scan output in both reference implementations).
    """
    gate = F.silu(z.float())
    y = y.float()
    if not norm_before_gate:
        y = y * gate
    shape = y.shape
    yg = y.reshape(*shape[:-1], groups, shape[-1] // groups)
    yg = yg * torch.rsqrt(yg.pow(2).mean(-1, keepdim=True) + eps)
    y = yg.reshape(shape) * weight.float()
    if norm_before_gate:
        y = y * gate
    return y


@dataclass(frozen=True)
class Mamba2Step:
    """What a Mamba2 layer's decode step reads besides its rows and state: the conv and the
    per-head parameters, as the mixer holds them (float32 on the native path)."""

    heads: int
    head_dim: int
    groups: int
    d_state: int
    conv_weight: torch.Tensor  # [conv_dim, K]
    conv_bias: torch.Tensor | None  # [conv_dim]
    dt_bias: torch.Tensor  # [heads]
    a_log: torch.Tensor  # [heads]
    d: torch.Tensor  # [heads]
    dt_min: float
    dt_max: float
    act: Callable[[torch.Tensor], torch.Tensor]  # on the conv output
    silu: bool  # whether ``act`` is silu (the one activation the native step computes)


def mamba2_decode(
    xbc: torch.Tensor, dt: torch.Tensor, window: torch.Tensor, p: Mamba2Step, h: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A Mamba2 decode step from the projections to the heads' output: ``xbc [S, conv_dim]``
    through the conv step (``window [S, conv_dim, K-1]`` shifted in place) and ``act``; the raw
    ``dt [S, heads]`` to ``clamp(softplus(dt + dt_bias))``; `ssd_step` with ``A = -exp(a_log)``
    (``h [S, heads, P, N]`` float32, updated in place) plus the D skip. Returns ``(y [S, heads
    * P], h)``."""
    conv, _ = conv_step(xbc, window, p.conv_weight, p.conv_bias, in_place=True)
    inner, gn = p.heads * p.head_dim, p.groups * p.d_state
    xs, b, c = p.act(conv).float().split([inner, gn, gn], dim=-1)
    s = xbc.shape[0]
    xs = xs.reshape(s, p.heads, p.head_dim)
    step = F.softplus(dt.float() + p.dt_bias.float()).clamp(min=p.dt_min, max=p.dt_max)
    a = -torch.exp(p.a_log.float())
    out, h = ssd_step(
        xs, step, a, b.reshape(s, p.groups, p.d_state), c.reshape(s, p.groups, p.d_state), h, in_place=True
    )
    out = out + p.d.float()[:, None] * xs
    return out.reshape(s, inner), h


def mamba2_segments(
    conv: torch.Tensor,
    dt: torch.Tensor,
    p: Mamba2Step,
    starts: list[torch.Tensor | None],
    segs: Segments,
    on_save: Callable[[int, torch.Tensor], None],
    chunk: int,
) -> torch.Tensor:
    """The Mamba2 prefill scan over a wave's segments, each in `ssd_chunked` (a one-token
    segment in `ssd_step`): ``conv [T, conv_dim]`` after the activation, the raw ``dt [T,
    heads]``, ``starts[b]`` sequence b's state ``[heads, P, N]`` before its first segment (read,
    not written; None: zeros); ``segs[b]`` sequence b's ``(lo, hi, key)`` token rows in order,
    ``on_save(key, state)`` called after a segment with a key. Returns ``y [T, heads * P]``
    with the D skip (float32)."""
    y = torch.empty(conv.shape[0], p.heads * p.head_dim, dtype=torch.float32, device=conv.device)
    a = -torch.exp(p.a_log.float())
    shape = (p.heads, p.head_dim, p.d_state)
    for start, mine in zip(starts, segs, strict=True):
        h = conv.new_zeros(shape, dtype=torch.float32) if start is None else start.float()
        for lo, hi, key in mine:
            y[lo:hi], h = _segment(conv[lo:hi], dt[lo:hi], p, a, h, chunk)
            if key is not None:
                on_save(key, h)
    return y


def _segment(
    conv: torch.Tensor, dt: torch.Tensor, p: Mamba2Step, a: torch.Tensor, h: torch.Tensor, chunk: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One segment of `mamba2_segments`: ``(y [L, heads * P], the state after it)``."""
    length, gn = conv.shape[0], p.groups * p.d_state
    xs, b, c = conv.float().split([p.heads * p.head_dim, gn, gn], dim=-1)
    xs = xs.reshape(length, p.heads, p.head_dim)
    b, c = b.reshape(length, p.groups, p.d_state), c.reshape(length, p.groups, p.d_state)
    step = F.softplus(dt.float() + p.dt_bias.float()).clamp(min=p.dt_min, max=p.dt_max)
    if length == 1:
        out, h1 = ssd_step(xs, step, a, b, c, h.unsqueeze(0))
        h = h1[0]
    else:
        out, h = ssd_chunked(xs, step, a, b, c, h, chunk)
    out = out + p.d.float()[:, None] * xs
    return out.reshape(length, -1), h
