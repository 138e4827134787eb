"""The other layers' native kernels as tensor functions: decode attention, the RMS norms,
rotary embeddings, KV writes and a linear over a few rows, run by `steps.c`.

Each function takes CPU float32 tensors, passes them to the library by ``data_ptr()`` and keeps
the eager function's contract (`radixflow.models.kernels.step`, `ssd.gated_rms_norm`); inputs
that are not contiguous are copied first (a view of a projection's columns, `tensor_args`).
"""

from __future__ import annotations

import ctypes
import math

import torch

from radixflow.models.kernels.native.tensor_args import dense, float_rows, ptr


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
    q, kc, vc = dense(q), dense(kc), dense(vc)
    slots, lengths = slots.to(torch.int64).contiguous(), lengths.to(torch.int64).contiguous()
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    if rows:
        failed = lib.rf_decode_attention(
            rows,
            heads,
            kv_heads,
            dim,
            width,
            ptr(q),
            ptr(kc),
            ptr(vc),
            ptr(slots),
            ptr(lengths),
            scale,
            ptr(out),
        )
        if failed:
            raise MemoryError("native decode attention: no memory for its scratch")
    return out


def rms_norm(
    lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float
) -> torch.Tensor:
    """`step.rms_norm` in one call (float32): ``x [..., dim]`` -> same shape."""
    x, weight = dense(x), dense(weight)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_rms_norm(x.numel() // dim, dim, ptr(x), ptr(weight), offset, eps, ptr(out))
    return out


def add_rms_norm(
    lib: ctypes.CDLL,
    x: torch.Tensor,
    delta: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    offset: float,
    into: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x + delta`` and `step.rms_norm` of it in one call (float32): ``x``, ``delta [..., dim]``
    -> ``(sum, normed)``, both of that shape, written into ``into`` (contiguous tensors of that
    shape, which may be ``x`` and ``delta`` themselves: each vector is summed before its norm
    is written) or new tensors."""
    x, delta, weight = dense(x), dense(delta), dense(weight)
    dim = x.shape[-1]
    total, out = (torch.empty_like(x), torch.empty_like(x)) if into is None else into
    if x.numel():
        rows, ptrs = x.numel() // dim, (ptr(x), ptr(delta), ptr(weight))
        lib.rf_add_rms_norm(rows, dim, *ptrs, offset, eps, ptr(total), ptr(out))
    return total, out


def gated_rms_norm(
    lib: ctypes.CDLL, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float
) -> torch.Tensor:
    """`step.gated_rms_norm` in one call (float32): ``x``, ``gate [..., dim]`` -> same shape."""
    x, gate, weight = dense(x), dense(gate), dense(weight)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_gated_rms_norm(x.numel() // dim, dim, ptr(x), ptr(gate), ptr(weight), eps, ptr(out))
    return out


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
    x, weight = dense(x), dense(weight)
    gate = float_rows(gate) if gate.dim() == 2 else dense(gate)
    dim = x.shape[-1]
    out = torch.empty_like(x)
    if x.numel():
        lib.rf_group_gated_rms_norm(
            x.numel() // dim,
            dim,
            groups,
            int(norm_before_gate),
            ptr(x),
            ptr(gate),
            gate.stride(-2) if gate.dim() > 1 else dim,
            ptr(weight),
            eps,
            ptr(out),
        )
    return out


def relu2_(lib: ctypes.CDLL, x: torch.Tensor) -> torch.Tensor:
    """``relu(x) ** 2`` written into ``x`` (CPU float32) in one pass; returns ``x``, or a
    contiguous copy holding the result where ``x`` is not contiguous."""
    x = dense(x)
    if x.numel():
        lib.rf_relu2(x.numel(), ptr(x))
    return x


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
    k, v, slots = dense(k), dense(v), slots.to(torch.int64).contiguous()
    if n:
        lib.rf_kv_write(n, span, ptr(k), ptr(v), ptr(slots), ptr(kc), ptr(vc))


def rotary(lib: ctypes.CDLL, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`step.rotary` in one call: ``x [T, heads, dim]`` rotated over the first ``rot`` dims of
    each head by ``cos``, ``sin [T, 1, rot]`` -> a new ``[T, heads, dim]``."""
    tokens, heads, dim = x.shape
    if x.stride(2) != 1 or x.stride(1) != dim or x.dtype != torch.float32 or not x.is_cpu:
        x = dense(x)  # a token's heads must lie together; a row stride is passed along
    cos, sin = dense(cos), dense(sin)
    out = torch.empty(tokens, heads, dim, dtype=torch.float32)
    if x.numel():
        lib.rf_rotary(tokens, heads, dim, cos.shape[-1], ptr(x), x.stride(0), ptr(cos), ptr(sin), ptr(out))
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
        x = dense(x)
    weight, cos, sin = dense(weight), dense(cos), dense(sin)
    out = torch.empty(tokens, heads, dim, dtype=torch.float32)
    if x.numel():
        shape = (tokens, heads, dim, cos.shape[-1])
        strides = (x.stride(0), x.stride(1))
        tables = (ptr(cos), ptr(sin), ptr(out))
        if lib.rf_rms_norm_rotary(*shape, ptr(x), *strides, ptr(weight), offset, eps, *tables):
            raise MemoryError("native rms_norm_rotary: no memory for its scratch")
    return out


def linear_rows(
    lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``F.linear`` in one call (float32), for a few rows: ``x [..., k]`` times ``weight [n, k]``
    transposed, plus ``bias [n]`` -> ``[..., n]`` (rows of ``x`` read where they lie)."""
    k, n, lead = x.shape[-1], weight.shape[0], x.shape[:-1]
    rows = float_rows(x.reshape(math.prod(lead), k))
    weight = dense(weight)
    bias = None if bias is None else dense(bias)
    out = torch.empty(rows.shape[0], n, dtype=torch.float32)
    if out.numel():
        b = None if bias is None else ptr(bias)
        lib.rf_linear_rows(rows.shape[0], n, k, ptr(rows), rows.stride(0), ptr(weight), b, ptr(out))
    return out.view(*lead, n)
