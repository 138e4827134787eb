"""The native kernels as tensor functions: the eager steps' signatures, run by `steps.c`.

Each function takes CPU float32 tensors, passes them to the library by ``data_ptr()`` and keeps
the eager function's contract (`radixflow.models.kernels.step`, `ssd.ssd_step`): the recurrent
state and the conv window are updated where they lie. Inputs that are not contiguous are copied
first (a view of a projection's columns); a state that is not contiguous is stepped in a copy
and copied back, so the caller's tensor always holds the new state.
"""

from __future__ import annotations

import ctypes
import math

import torch

from radixflow.models.kernels.ssd import Mamba2Step


def _dense(t: torch.Tensor) -> torch.Tensor:
    # `is_cpu`, not `device.type`: a decode round checks ~180 tensors, and building a
    # torch.device for each costs more than the check itself
    if t.dtype != torch.float32 or not t.is_cpu:
        raise TypeError(f"native kernels take CPU float32 tensors, got {t.dtype} on {t.device}")
    return t.contiguous()


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t`` as rows of contiguous floats (a row stride is passed along: a view of a
    projection's columns is not copied)."""
    return t if t.stride(-1) == 1 and t.dtype == torch.float32 and t.is_cpu else _dense(t)


def _ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


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
    q, k, v, g, beta = (_dense(t) for t in (q, k, v, g, beta))
    work = _dense(state)
    out = torch.empty(rows, heads, dv, dtype=torch.float32)
    if rows:
        failed = lib.rf_gated_delta_step(
            rows, heads, dk, dv, _ptr(q), _ptr(k), _ptr(v), _ptr(g), _ptr(beta), _ptr(work), _ptr(out)
        )
        if failed:
            raise MemoryError("native gated delta step: no memory for its scratch")
    return out, _written_back(state, work)


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
    q, k, v, g, beta = (_dense(t) for t in (q, k, v, g, beta))
    runs = runs.to(torch.int64).contiguous()
    work = _dense(states)
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
            _ptr(q),
            _ptr(k),
            _ptr(v),
            _ptr(g),
            _ptr(beta),
            _ptr(lo),
            _ptr(hi),
            _ptr(seq),
            _ptr(save),
            _ptr(work),
            _ptr(saved),
            _ptr(out),
        )
        if failed:
            raise MemoryError("native gated delta scan: no memory for its scratch")
    _written_back(states, work)
    return out, saved


def conv_silu_runs(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    rows: torch.Tensor,
    lengths: list[int],
    windows: torch.Tensor,
    weight: torch.Tensor,
) -> torch.Tensor:
    """``silu(causal depthwise conv)`` of several sequences' prefill tokens: token p reads row
    ``rows[p]`` of ``x [*, C]``, the sequences' tokens consecutive in ``lengths``, each behind its
    window ``windows [B, C, K-1]`` (oldest first); ``weight [C, K]``. Returns ``[tokens, C]``."""
    channels, taps = weight.shape
    x, windows, weight = _rows(x), _dense(windows), _dense(weight)
    rows = rows.to(torch.int64).contiguous()
    bounds = torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0)
    lo, hi = bounds[:-1].contiguous(), bounds[1:].contiguous()
    out = torch.empty(len(rows), channels, dtype=torch.float32)
    if len(rows):
        lib.rf_conv_silu_runs(
            len(lengths),
            channels,
            taps,
            _ptr(x),
            x.stride(0),
            _ptr(rows),
            _ptr(lo),
            _ptr(hi),
            _ptr(windows),
            _ptr(weight),
            _ptr(out),
        )
    return out


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
    qkv = _rows(qkv)
    b, a = _dense(gates[0]), _dense(gates[1])
    a_log, dt_bias = _dense(gates[2]), _dense(gates[3])
    weight = _dense(weight)
    work_window, work_state = _dense(window), _dense(state)
    out = torch.empty(rows, heads, dv, dtype=torch.float32)
    if rows:
        failed = lib.rf_deltanet_decode(
            rows,
            key_heads,
            heads,
            dk,
            dv,
            taps,
            _ptr(qkv),
            qkv.stride(0),
            _ptr(work_window),
            _ptr(weight),
            _ptr(b),
            _ptr(a),
            heads,
            _ptr(a_log),
            _ptr(dt_bias),
            _ptr(work_state),
            _ptr(out),
        )
        if failed:
            raise MemoryError("native deltanet decode: no memory for its scratch")
    _written_back(window, work_window)
    return out, _written_back(state, work_state)


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
    x, dt, a, b, c = (_dense(t) for t in (x, dt, a, b, c))
    work = _dense(h)
    y = torch.empty(rows, heads, p, dtype=torch.float32)
    if rows:
        lib.rf_ssd_step(
            rows, heads, groups, p, n, _ptr(x), _ptr(dt), _ptr(a), _ptr(b), _ptr(c), _ptr(work), _ptr(y)
        )
    return y, _written_back(h, work)


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
    x = _rows(x)
    weight = _dense(weight)
    bias = None if bias is None else _dense(bias)
    work = _dense(window)
    out = torch.empty(rows, channels, dtype=torch.float32)
    if rows:
        lib.rf_conv_step(
            rows,
            channels,
            taps,
            _ptr(x),
            x.stride(0),
            _ptr(work),
            _ptr(weight),
            None if bias is None else _ptr(bias),
            _ptr(out),
        )
    return out, _written_back(window, work)


def decode_attention(
    lib: ctypes.CDLL,
    q: torch.Tensor,
    kc: torch.Tensor,
    vc: torch.Tensor,
    slots: torch.Tensor,
    lengths: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query per row over its paged context, read from the pool where it lies:
    ``q [G, heads, dim]``, ``kc``/``vc [pool slots, kv_heads, dim]``, ``slots [G, width]``
    (int64; positions past a row's length are never read), ``lengths [G]`` (each >= 1)
    -> ``[G, heads, dim]``."""
    rows, heads, dim = q.shape
    kv_heads, width = kc.shape[1], slots.shape[1]
    q, kc, vc = _dense(q), _dense(kc), _dense(vc)
    slots, lengths = slots.to(torch.int64).contiguous(), lengths.to(torch.int64).contiguous()
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    if rows:
        failed = lib.rf_decode_attention(
            rows,
            heads,
            kv_heads,
            dim,
            width,
            _ptr(q),
            _ptr(kc),
            _ptr(vc),
            _ptr(slots),
            _ptr(lengths),
            scale,
            _ptr(out),
        )
        if failed:
            raise MemoryError("native decode attention: no memory for its scratch")
    return out


def rms_norm(
    lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float
) -> torch.Tensor:
    """`step.rms_norm` in one call (float32): ``x [..., dim]`` -> same shape."""
    x, weight = _dense(x), _dense(weight)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_rms_norm(x.numel() // dim, dim, _ptr(x), _ptr(weight), offset, eps, _ptr(out))
    return out


def add_rms_norm(
    lib: ctypes.CDLL, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, offset: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x + delta`` and `step.rms_norm` of it in one call (float32): ``x``, ``delta [..., dim]``
    -> ``(sum, normed)``, both of that shape."""
    x, delta, weight = _dense(x), _dense(delta), _dense(weight)
    dim = x.shape[-1]
    total, out = torch.empty_like(x), torch.empty_like(x)
    if x.numel():
        rows, ptrs = x.numel() // dim, (_ptr(x), _ptr(delta), _ptr(weight))
        lib.rf_add_rms_norm(rows, dim, *ptrs, offset, eps, _ptr(total), _ptr(out))
    return total, out


def gated_rms_norm(
    lib: ctypes.CDLL, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """`step.gated_rms_norm` in one call (float32): ``x``, ``gate [..., dim]`` -> same shape."""
    x, gate, weight = _dense(x), _dense(gate), _dense(weight)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_gated_rms_norm(x.numel() // dim, dim, _ptr(x), _ptr(gate), _ptr(weight), eps, _ptr(out))
    return out


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
    xbc, dt = _rows(xbc), _rows(dt)
    weight = _dense(params.conv_weight)
    bias = None if params.conv_bias is None else _dense(params.conv_bias)
    dt_bias, a_log, d = _dense(params.dt_bias), _dense(params.a_log), _dense(params.d)
    work_window, work_h = _dense(window), _dense(h)
    y = torch.empty(rows, params.heads * params.head_dim, dtype=torch.float32)
    if rows:
        failed = lib.rf_mamba2_decode(
            rows,
            params.heads,
            params.groups,
            params.head_dim,
            params.d_state,
            taps,
            _ptr(xbc),
            xbc.stride(0),
            _ptr(dt),
            dt.stride(0),
            _ptr(work_window),
            _ptr(weight),
            None if bias is None else _ptr(bias),
            _ptr(dt_bias),
            _ptr(a_log),
            _ptr(d),
            params.dt_min,
            params.dt_max,
            _ptr(work_h),
            _ptr(y),
        )
        if failed:
            raise MemoryError("native mamba2 decode: no memory for its scratch")
    _written_back(window, work_window)
    return y, _written_back(h, work_h)


def group_gated_rms_norm(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    gate: torch.Tensor,
    weight: torch.Tensor,
    groups: int,
    eps: float,
    norm_before_gate: bool,
) -> torch.Tensor:
    """`ssd.gated_rms_norm` in one call (float32): ``x``, ``gate [..., dim]`` -> same shape (a
    2-D gate may be a view of a projection's columns: its row stride is passed along)."""
    x, weight = _dense(x), _dense(weight)
    gate = _rows(gate) if gate.dim() == 2 else _dense(gate)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_group_gated_rms_norm(
            x.numel() // dim,
            dim,
            groups,
            int(norm_before_gate),
            _ptr(x),
            _ptr(gate),
            gate.stride(-2) if gate.dim() > 1 else dim,
            _ptr(weight),
            eps,
            _ptr(out),
        )
    return out


def kv_write(
    lib: ctypes.CDLL,
    kc: torch.Tensor,
    vc: torch.Tensor,
    slots: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """`step.kv_write` in one call (float32, the pool contiguous): mutates ``kc``, ``vc``."""
    n = k.shape[0]
    span = kc.stride(0)  # a contiguous pool's row (kc[0].numel() is a view op, ~1 us a layer)
    k, v, slots = _dense(k), _dense(v), slots.to(torch.int64).contiguous()
    if n:
        lib.rf_kv_write(n, span, _ptr(k), _ptr(v), _ptr(slots), _ptr(kc), _ptr(vc))


def rotary(lib: ctypes.CDLL, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`step.rotary` in one call: ``x [T, heads, dim]`` rotated over the first ``rot`` dims of
    each head by ``cos``, ``sin [T, 1, rot]`` -> a new ``[T, heads, dim]``."""
    tokens, heads, dim = x.shape
    if x.stride(2) != 1 or x.stride(1) != dim or x.dtype != torch.float32 or not x.is_cpu:
        x = _dense(x)  # a token's heads must lie together; a row stride is passed along
    cos, sin = _dense(cos), _dense(sin)
    out = torch.empty(tokens, heads, dim, dtype=torch.float32)
    if x.numel():
        lib.rf_rotary(
            tokens, heads, dim, cos.shape[-1], _ptr(x), x.stride(0), _ptr(cos), _ptr(sin), _ptr(out)
        )
    return out


def rms_norm_rotary(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    offset: float,
    cos: torch.Tensor,
    sin: torch.Tensor,
) -> torch.Tensor:
    """`rms_norm` of each head, then `rotary`, in one call: ``x [T, heads, dim]`` (read where it
    lies if each head's floats are contiguous), ``weight [dim]``, ``cos``, ``sin [T, 1, rot]``
    -> a new ``[T, heads, dim]``, equal to the bit to the two calls."""
    tokens, heads, dim = x.shape
    if x.stride(2) != 1 or x.dtype != torch.float32 or not x.is_cpu:
        x = _dense(x)
    weight, cos, sin = _dense(weight), _dense(cos), _dense(sin)
    out = torch.empty(tokens, heads, dim, dtype=torch.float32)
    if x.numel():
        shape = (tokens, heads, dim, cos.shape[-1])
        strides = (x.stride(0), x.stride(1))
        tables = (_ptr(cos), _ptr(sin), _ptr(out))
        if lib.rf_rms_norm_rotary(*shape, _ptr(x), *strides, _ptr(weight), offset, eps, *tables):
            raise MemoryError("native rms_norm_rotary: no memory for its scratch")
    return out


def _written_back(target: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
    """``target`` holding ``work``'s values (nothing to do when the step ran on it directly)."""
    if work.data_ptr() != target.data_ptr():
        target.copy_(work)
    return target


def linear_rows(
    lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``F.linear`` in one call (float32), for a few rows: ``x [..., k]`` times ``weight [n, k]``
    transposed, plus ``bias [n]`` -> ``[..., n]`` (rows of ``x`` read where they lie)."""
    k, n, lead = x.shape[-1], weight.shape[0], x.shape[:-1]
    rows = _rows(x.reshape(math.prod(lead), k))
    weight = _dense(weight)
    bias = None if bias is None else _dense(bias)
    out = torch.empty(rows.shape[0], n, dtype=torch.float32)
    if out.numel():
        b = None if bias is None else _ptr(bias)
        lib.rf_linear_rows(rows.shape[0], n, k, _ptr(rows), rows.stride(0), _ptr(weight), b, _ptr(out))
    return out.view(*lead, n)
