"""The recurrent mixers' native kernels as tensor functions: the eager steps' signatures (Gated
DeltaNet, Mamba2's SSD, the short conv), run by `steps.c`.

Each function takes CPU float32 tensors, passes them to the library by ``data_ptr()`` and keeps
the eager function's contract (`radixflow.models.kernels.step`, `ssd.ssd_step`): the recurrent
state and the conv window are updated where they lie. Inputs that are not contiguous are copied
first (a view of a projection's columns); a state that is not contiguous is stepped in a copy
and copied back, so the caller's tensor always holds the new state (`tensor_args`).
"""

from __future__ import annotations

import ctypes

import torch

from radixflow.models.kernels.native.tensor_args import dense, float_rows, ptr, written_back
from radixflow.models.kernels.ssd import Mamba2Step


def gated_delta_step(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`step.gated_delta_step` with ``in_place=True``: ``(o [S, H, dv], state)``."""
    rows, heads, dk = k.shape
    dv = v.shape[-1]
    q, k, v, g, beta = (dense(t) for t in (q, k, v, g, beta))
    work = dense(state)
    out = torch.empty(rows, heads, dv, dtype=torch.float32)
    if rows:
        failed = lib.rf_gated_delta_step(
            rows, heads, dk, dv, ptr(q), ptr(k), ptr(v), ptr(g), ptr(beta), ptr(work), ptr(out)
        )
        if failed:
            raise MemoryError("native gated delta step: no memory for its scratch")
    return out, written_back(state, work)


def deltanet_decode(
    lib: ctypes.CDLL,
    qkv: torch.Tensor,
    window: torch.Tensor,
    weight: torch.Tensor,
    key_heads: int,
    dk: int,
    gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`step.deltanet_decode` in one call: ``(o [S, H, dv], state)``, window and state updated
    where they lie; ``gates``: ``(b, a [S, H], a_log, dt_bias [H])``."""
    rows, heads, _, dv = state.shape
    taps = weight.shape[-1]
    qkv = float_rows(qkv)
    b, a = dense(gates[0]), dense(gates[1])
    a_log, dt_bias = dense(gates[2]), dense(gates[3])
    weight = dense(weight)
    work_window, work_state = dense(window), dense(state)
    out = torch.empty(rows, heads, dv, dtype=torch.float32)
    if rows:
        failed = lib.rf_deltanet_decode(
            rows,
            key_heads,
            heads,
            dk,
            dv,
            taps,
            ptr(qkv),
            qkv.stride(0),
            ptr(work_window),
            ptr(weight),
            ptr(b),
            ptr(a),
            heads,
            ptr(a_log),
            ptr(dt_bias),
            ptr(work_state),
            ptr(out),
        )
        if failed:
            raise MemoryError("native deltanet decode: no memory for its scratch")
    written_back(window, work_window)
    return out, written_back(state, work_state)


def ssd_step(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    dt: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    h: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ssd.ssd_step` with ``in_place=True``: ``(y [S, H, P], h)``."""
    rows, heads, p = x.shape
    groups, n = b.shape[1], b.shape[2]
    x, dt, a, b, c = (dense(t) for t in (x, dt, a, b, c))
    work = dense(h)
    y = torch.empty(rows, heads, p, dtype=torch.float32)
    if rows:
        lib.rf_ssd_step(rows, heads, groups, p, n, ptr(x), ptr(dt), ptr(a), ptr(b), ptr(c), ptr(work), ptr(y))
    return y, written_back(h, work)


def conv_step(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    window: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`step.conv_step` with ``in_place=True``: ``(out [S, C], window)``, the window shifted
    where it lies."""
    rows, channels = x.shape
    taps = weight.shape[-1]
    x = float_rows(x)
    weight = dense(weight)
    bias = None if bias is None else dense(bias)
    work = dense(window)
    out = torch.empty(rows, channels, dtype=torch.float32)
    if rows:
        lib.rf_conv_step(
            rows,
            channels,
            taps,
            ptr(x),
            x.stride(0),
            ptr(work),
            ptr(weight),
            None if bias is None else ptr(bias),
            ptr(out),
        )
    return out, written_back(window, work)


def mamba2_decode(
    lib: ctypes.CDLL,
    xbc: torch.Tensor,
    dt: torch.Tensor,
    window: torch.Tensor,
    params: Mamba2Step,
    h: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`ssd.mamba2_decode` in one call (silu only): ``(y [S, heads * head_dim], h)``, window
    and state updated where they lie."""
    rows, taps = xbc.shape[0], params.conv_weight.shape[-1]
    xbc, dt = float_rows(xbc), float_rows(dt)
    weight = dense(params.conv_weight)
    bias = None if params.conv_bias is None else dense(params.conv_bias)
    dt_bias, a_log, d = dense(params.dt_bias), dense(params.a_log), dense(params.d)
    work_window, work_h = dense(window), dense(h)
    y = torch.empty(rows, params.heads * params.head_dim, dtype=torch.float32)
    if rows:
        failed = lib.rf_mamba2_decode(
            rows,
            params.heads,
            params.groups,
            params.head_dim,
            params.d_state,
            taps,
            ptr(xbc),
            xbc.stride(0),
            ptr(dt),
            dt.stride(0),
            ptr(work_window),
            ptr(weight),
            None if bias is None else ptr(bias),
            ptr(dt_bias),
            ptr(a_log),
            ptr(d),
            params.dt_min,
            params.dt_max,
            ptr(work_h),
            ptr(y),
        )
        if failed:
            raise MemoryError("native mamba2 decode: no memory for its scratch")
    written_back(window, work_window)
    return y, written_back(h, work_h)
