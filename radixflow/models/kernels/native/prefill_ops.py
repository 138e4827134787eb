"""The recurrent mixers' native prefill kernels as tensor functions: a wave's segments in one
call, token by token (the Gated DeltaNet's delta rule, Mamba2's scan) and the prefill conv of
every recurrent mixer, run by `steps.c`.

As `mixer_ops` (the decode steps): CPU float32 tensors passed by ``data_ptr()``, inputs that are
not contiguous copied first or read as rows with a stride (`tensor_args`); each function's
docstring says where it reads the segments' initial states and where the saved ones go.
"""

from __future__ import annotations

import ctypes

import torch

from radixflow.models.kernels.native.tensor_args import dense, float_rows, ptr, written_back
from radixflow.models.kernels.ssd import Mamba2Step


def gated_delta_scan(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    runs: torch.Tensor,
    states: torch.Tensor,
    saves: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token over runs of a round's token rows: ``q``, ``k [T,
    key_heads, dk]``, ``v [T, heads, dv]``, ``g``, ``beta [T, heads]``; ``runs [R, 4]`` int64
    rows ``(lo, hi, state index, save index or -1)``, a sequence's runs in order; ``states [B,
    heads, dk, dv]`` updated in place. Returns ``(o [T, heads, dv], saved [saves, heads, dk,
    dv])``: the state after each run that names a save index."""
    rows, key_heads, dk = k.shape
    heads, dv = v.shape[1], v.shape[2]
    q, k, v, g, beta = (dense(t) for t in (q, k, v, g, beta))
    runs = runs.to(torch.int64).contiguous()
    work = dense(states)
    out = torch.empty(rows, heads, dv, dtype=torch.float32)
    saved = torch.empty(saves, heads, dk, dv, dtype=torch.float32)
    if len(runs):
        lo, hi, seq, save = (runs[:, i].contiguous() for i in range(4))
        failed = lib.rf_gated_delta_scan(
            len(runs),
            key_heads,
            heads,
            dk,
            dv,
            ptr(q),
            ptr(k),
            ptr(v),
            ptr(g),
            ptr(beta),
            ptr(lo),
            ptr(hi),
            ptr(seq),
            ptr(save),
            ptr(work),
            ptr(saved),
            ptr(out),
        )
        if failed:
            raise MemoryError("native gated delta scan: no memory for its scratch")
    written_back(states, work)
    return out, saved


def conv_runs(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    rows: torch.Tensor,
    lengths: list[int],
    windows: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    silu: bool,
) -> torch.Tensor:
    """The causal depthwise conv (+ ``bias``, then silu when ``silu``) of several sequences'
    prefill tokens: token p reads row ``rows[p]`` of ``x [*, C]``, the sequences' tokens
    consecutive in ``lengths``, each behind its window ``windows [B, C, K-1]`` (oldest first);
    ``weight [C, K]``. Returns ``[tokens, C]``."""
    channels, taps = weight.shape
    x, windows, weight = float_rows(x), dense(windows), dense(weight)
    bias = None if bias is None else dense(bias)
    rows = rows.to(torch.int64).contiguous()
    bounds = torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0)
    lo, hi = bounds[:-1].contiguous(), bounds[1:].contiguous()
    out = torch.empty(len(rows), channels, dtype=torch.float32)
    if len(rows):
        failed = lib.rf_conv_runs(
            len(lengths),
            channels,
            taps,
            ptr(x),
            x.stride(0),
            ptr(rows),
            ptr(lo),
            ptr(hi),
            ptr(windows),
            ptr(weight),
            None if bias is None else ptr(bias),
            int(silu),
            ptr(out),
        )
        if failed:
            raise MemoryError("native prefill conv: no memory for its transposed weight")
    return out


def mamba2_scan(
    lib: ctypes.CDLL,
    conv: torch.Tensor,
    dt: torch.Tensor,
    params: Mamba2Step,
    runs: torch.Tensor,
    starts: list[torch.Tensor | None],
    saves: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Mamba2 prefill scan token by token over runs of a wave's token rows: ``conv [T,
    conv_dim]`` (after the activation), the raw ``dt [T, heads]`` (rows with a stride: a view of
    the projection's columns is not copied); ``runs [R, 4]`` int64 rows
    ``(lo, hi, sequence, save index or -1)``, a sequence's runs consecutive and in order;
    ``starts[b]`` sequence b's state ``[heads, P, N]`` before its first run, read where it lies
    (None: zeros). Returns ``(y [T, heads * P] with the D skip, saved [saves, heads, P, N])``:
    the state after each run that names a save index."""
    conv, dt = dense(conv), float_rows(dt)
    dt_bias, a_log, d = dense(params.dt_bias), dense(params.a_log), dense(params.d)
    runs = runs.to(torch.int64).contiguous()
    held = [None if s is None else dense(s) for s in starts]  # alive through the call
    addresses = torch.tensor([0 if s is None else ptr(s) for s in held], dtype=torch.int64)
    heads, p, n = params.heads, params.head_dim, params.d_state
    y = torch.empty(conv.shape[0], heads * p, dtype=torch.float32)
    saved = torch.empty(saves, heads, p, n, dtype=torch.float32)
    if len(runs):
        lo, hi, seq, save = (runs[:, i].contiguous() for i in range(4))
        failed = lib.rf_mamba2_scan(
            len(runs),
            heads,
            params.groups,
            p,
            n,
            ptr(conv),
            ptr(dt),
            dt.stride(0),
            ptr(dt_bias),
            ptr(a_log),
            ptr(d),
            params.dt_min,
            params.dt_max,
            ptr(lo),
            ptr(hi),
            ptr(seq),
            ptr(save),
            ptr(addresses),
            ptr(saved),
            ptr(y),
        )
        if failed:
            raise MemoryError("native mamba2 scan: no memory for its scratch")
    return y, saved
