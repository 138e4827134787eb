"""Which kernels a round's recurrent steps run: the eager torch ops or the native (C) library.

A `Kernels` backend runs the one-token decode steps that are not GEMMs (the conv window step,
the gated delta rule step, the Mamba2 step from its projection to the D skip, decode attention
over the paged KV pool), the small per-layer ops around them (norms, the rotary embedding, the KV
write) and the Gated DeltaNet prefill's conv and delta rule over a round's segments. `TorchKernels` is
the eager reference (`kernels.step`, `kernels.ssd`, one fused SDPA call over a gathered
context, the packed conv, the chunked delta rule); `NativeKernels` runs `native/steps.c`, built
at first use, which passes over each row's state once or twice while it is in cache, reads the
KV and a prefill's conv inputs where they lie, and runs a prefill's delta rule token by token
with each head's state in cache (on a CPU cheaper than the chunked form at every length: fewer
multiply-adds than its 64-token chunks, none in padding or small-matmul dispatch). The runner
resolves the engine option (``auto``, ``native``, ``torch``) once (`resolve_kernels`) and every
`ForwardBatch` carries the result; Mamba2 and short-conv prefill keep their eager kernels
either way.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
import torch.nn.functional as F

from radixflow.models.kernels import ssd, step
from radixflow.models.kernels.delta_rule import Segments, gated_delta_rule_segments
from radixflow.models.kernels.native import layer_ops, mixer_ops
from radixflow.models.kernels.native.build import Built, build, find_compiler
from radixflow.models.kernels.packed_conv import PackedConv, window_after_inputs

log = logging.getLogger("radixflow.kernels")

# (cache, pool slots, 0 for K / 1 for V) -> the rows at those slots, as `KVPool.gather` returns them
Gather = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
# (sequence, tokens) -> that sequence's conv state after its first `tokens` inputs, [C, K-1]
WindowAfter = Callable[[int, int], torch.Tensor]


class PagedContext(Protocol):
    """Decode rows' KV slots, padded to the longest row (`models.decode_rows.DecodeContext`)."""

    slots: torch.Tensor  # [G, width] long
    valid: torch.Tensor  # [G, width] bool: position < the row's end
    ends: torch.Tensor  # [G] long: each row's context length
    ragged: bool  # some row is shorter than width


class Kernels(Protocol):
    name: str

    def conv_step(
        self, x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.conv_step`, the window shifted in place."""
        ...

    def gated_delta_step(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.gated_delta_step`, the state updated in place."""
        ...

    def deltanet_decode(
        self,
        qkv: torch.Tensor,
        window: torch.Tensor,
        weight: torch.Tensor,
        key_heads: int,
        dk: int,
        gates: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`step.deltanet_decode`: conv, silu, heads, gates from ``(b, a, a_log, dt_bias)`` and
        delta rule, window and state in place."""
        ...

    def prefill_conv_silu(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        lengths: list[int],
        windows: torch.Tensor,
        weight: torch.Tensor,
    ) -> tuple[torch.Tensor, WindowAfter]:
        """``silu(causal depthwise conv)`` of a wave's prefill tokens (the Gated DeltaNet front
        end): token p reads row ``rows[p]`` of ``x [*, C]``, sequence b's tokens consecutive,
        ``lengths[b]`` of them, behind its window ``windows[b] [C, K-1]``; ``weight [C, K]``.
        Returns ``([tokens, C], window_after)``."""
        ...

    def delta_rule_prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        states: torch.Tensor,
        segs: Segments,
        on_save: Callable[[int, torch.Tensor], None],
    ) -> torch.Tensor:
        """`delta_rule.gated_delta_rule_segments`: the delta rule over a round's prefill
        segments (key heads not repeated), ``states`` the call's own."""
        ...

    def gated_rms_norm(
        self, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> torch.Tensor:
        """`step.gated_rms_norm`: the Gated DeltaNet output norm, per head."""
        ...

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
        """`step.rms_norm`."""
        ...

    def add_rms_norm(
        self, x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float, offset: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(x + delta, step.rms_norm(x + delta))``: a residual add and the next norm."""
        ...

    def ssd_step(
        self,
        x: torch.Tensor,
        dt: torch.Tensor,
        a: torch.Tensor,
        b: torch.Tensor,
        c: torch.Tensor,
        h: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`ssd.ssd_step`, the state updated in place."""
        ...

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """`step.rotary`: ``x [T, heads, dim]`` rotated by the tables -> a new tensor."""
        ...

    def rms_norm_rotary(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        eps: float,
        offset: float,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        """``rotary(rms_norm(x, ...), cos, sin)``: a per-head q/k norm and the rotation after it."""
        ...

    def kv_write(
        self, kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> None:
        """`step.kv_write`: mutates ``kc``, ``vc`` (a layer's K and V pool) at rows ``slots``."""
        ...

    def mamba2_decode(
        self,
        xbc: torch.Tensor,
        dt: torch.Tensor,
        window: torch.Tensor,
        params: ssd.Mamba2Step,
        h: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`ssd.mamba2_decode`: ``(y [S, heads * head_dim], h)``; mutates ``window`` and ``h``
        (the rows' conv window and state, stepped where they lie)."""
        ...

    def group_gated_rms_norm(
        self, x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, groups: int, eps: float, before: bool
    ) -> torch.Tensor:
        """`ssd.gated_rms_norm` (``before``: the norm before the gate)."""
        ...

    def decode_attention(
        self,
        q: torch.Tensor,
        kc: torch.Tensor,
        vc: torch.Tensor,
        context: PagedContext,
        scale: float,
        gather: Gather,
    ) -> torch.Tensor:
        """One query token per row ``q [G, heads, dim]`` over the rows' contexts in the pool's
        ``kc``/``vc [slots, kv_heads, dim]`` -> ``[G, heads, dim]``."""
        ...


class TorchKernels:
    """The eager steps: the reference every other backend is tested against."""

    name = "torch"

    def conv_step(self, x, window, weight, bias):  # type: ignore[no-untyped-def]
        return step.conv_step(x, window, weight, bias, in_place=True)

    def gated_delta_step(self, q, k, v, g, beta, state):  # type: ignore[no-untyped-def]
        return step.gated_delta_step(q, k, v, g, beta, state, in_place=True)

    def deltanet_decode(self, qkv, window, weight, key_heads, dk, gates, state):  # type: ignore[no-untyped-def]
        return step.deltanet_decode(qkv, window, weight, key_heads, dk, gates, state)

    def prefill_conv_silu(self, x, rows, lengths, windows, weight):  # type: ignore[no-untyped-def]
        """The rows packed behind their windows, one multiply-add per tap over the whole buffer."""
        packed = PackedConv.build(lengths, weight.shape[1] - 1, x.device)
        buf = packed.pack(x[rows], windows)
        return packed.conv(buf, weight), functools.partial(packed.window_after, buf)

    def delta_rule_prefill(self, q, k, v, g, beta, states, segs, on_save):  # type: ignore[no-untyped-def]
        return gated_delta_rule_segments(q, k, v, g, beta, states, segs, on_save)

    def gated_rms_norm(self, x, gate, weight, eps):  # type: ignore[no-untyped-def]
        return step.gated_rms_norm(x, gate, weight, eps)

    def rms_norm(self, x, weight, eps, offset):  # type: ignore[no-untyped-def]
        return step.rms_norm(x, weight, eps, offset)

    def add_rms_norm(self, x, delta, weight, eps, offset):  # type: ignore[no-untyped-def]
        total = x + delta
        return total, step.rms_norm(total, weight, eps, offset)

    def ssd_step(self, x, dt, a, b, c, h):  # type: ignore[no-untyped-def]
        return ssd.ssd_step(x, dt, a, b, c, h, in_place=True)

    def mamba2_decode(self, xbc, dt, window, params, h):  # type: ignore[no-untyped-def]
        return ssd.mamba2_decode(xbc, dt, window, params, h)

    def rotary(self, x, cos, sin):  # type: ignore[no-untyped-def]
        return step.rotary(x, cos, sin)

    def rms_norm_rotary(self, x, weight, eps, offset, cos, sin):  # type: ignore[no-untyped-def]
        return step.rotary(step.rms_norm(x, weight, eps, offset), cos, sin)

    def kv_write(self, kc, vc, slots, k, v):  # type: ignore[no-untyped-def]
        step.kv_write(kc, vc, slots, k, v)

    def group_gated_rms_norm(self, x, gate, weight, groups, eps, before):  # type: ignore[no-untyped-def]
        return ssd.gated_rms_norm(x, gate, weight, groups, eps, before)

    def decode_attention(self, q, kc, vc, context, scale, gather):  # type: ignore[no-untyped-def]
        """The context gathered into the pool's reused buffers, then one fused SDPA call (padding
        masked out; grouped KV heads shared inside the kernel, not copied)."""
        flat = context.slots.view(-1)
        shape = (*context.slots.shape, *kc.shape[1:])  # [G, L, kv_heads, dim]
        keys = gather(kc, flat, 0).view(shape).to(q.dtype).transpose(1, 2)  # [G, kv_heads, L, dim]
        vals = gather(vc, flat, 1).view(shape).to(q.dtype).transpose(1, 2)
        mask = context.valid[:, None, None, :] if context.ragged else None
        o = F.scaled_dot_product_attention(
            q[:, :, None], keys, vals, attn_mask=mask, scale=scale, enable_gqa=True
        )
        return o[:, :, 0]


class NativeKernels:
    """The steps of `native/steps.c` (CPU, float32): no gather of the KV context, one pass per
    state for the recurrences."""

    name = "native"

    def __init__(self, library: ctypes.CDLL) -> None:
        self.lib = library

    def conv_step(self, x, window, weight, bias):  # type: ignore[no-untyped-def]
        return mixer_ops.conv_step(self.lib, x, window, weight, bias)

    def gated_delta_step(self, q, k, v, g, beta, state):  # type: ignore[no-untyped-def]
        return mixer_ops.gated_delta_step(self.lib, q, k, v, g, beta, state)

    def deltanet_decode(self, qkv, window, weight, key_heads, dk, gates, state):  # type: ignore[no-untyped-def]
        return mixer_ops.deltanet_decode(self.lib, qkv, window, weight, key_heads, dk, gates, state)

    def prefill_conv_silu(self, x, rows, lengths, windows, weight):  # type: ignore[no-untyped-def]
        """One pass per token over its inputs where they lie (no packed copy); the windows to
        save read from the inputs too."""
        out = mixer_ops.conv_silu_runs(self.lib, x, rows, lengths, windows, weight)
        firsts = [0, *itertools.accumulate(lengths)]

        def window_after(seq: int, tokens: int) -> torch.Tensor:
            return window_after_inputs(x, rows, firsts[seq], windows[seq], tokens)

        return out, window_after

    def delta_rule_prefill(self, q, k, v, g, beta, states, segs, on_save):  # type: ignore[no-untyped-def]
        """Every segment token by token in one call; the saved states handed on after it."""
        runs, keys = [], []
        for b, mine in enumerate(segs):
            for lo, hi, key in mine:
                runs.append((lo, hi, b, -1 if key is None else len(keys)))
                if key is not None:
                    keys.append(key)
        table = torch.tensor(runs, dtype=torch.int64).view(-1, 4)
        out, saved = mixer_ops.gated_delta_scan(self.lib, q, k, v, g, beta, table, states, len(keys))
        for i, key in enumerate(keys):
            on_save(key, saved[i])
        return out

    def gated_rms_norm(self, x, gate, weight, eps):  # type: ignore[no-untyped-def]
        return layer_ops.gated_rms_norm(self.lib, x, gate, weight, eps)

    def rms_norm(self, x, weight, eps, offset):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or weight.dtype != torch.float32:
            return step.rms_norm(x, weight, eps, offset)  # the native kernels run float32 only
        return layer_ops.rms_norm(self.lib, x, weight, eps, offset)

    def add_rms_norm(self, x, delta, weight, eps, offset):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or delta.dtype != torch.float32 or weight.dtype != torch.float32:
            return TORCH_KERNELS.add_rms_norm(x, delta, weight, eps, offset)  # float32 only
        return layer_ops.add_rms_norm(self.lib, x, delta, weight, eps, offset)

    def ssd_step(self, x, dt, a, b, c, h):  # type: ignore[no-untyped-def]
        return mixer_ops.ssd_step(self.lib, x, dt, a, b, c, h)

    def kv_write(self, kc, vc, slots, k, v):  # type: ignore[no-untyped-def]
        f32 = torch.float32  # four comparisons, not a generator: this runs once a layer and round
        native = (
            kc.dtype == f32
            and vc.dtype == f32
            and k.dtype == f32
            and v.dtype == f32
            and kc.is_contiguous()
            and vc.is_contiguous()
        )
        if not native:  # the native kernels run float32 only, on a contiguous pool
            step.kv_write(kc, vc, slots, k, v)
            return
        layer_ops.kv_write(self.lib, kc, vc, slots, k, v)

    def rotary(self, x, cos, sin):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or cos.dtype != torch.float32:
            return step.rotary(x, cos, sin)  # the native kernels run float32 only
        return layer_ops.rotary(self.lib, x, cos, sin)

    def rms_norm_rotary(self, x, weight, eps, offset, cos, sin):  # type: ignore[no-untyped-def]
        if any(t.dtype != torch.float32 for t in (x, weight, cos)):  # float32 only: the two calls
            return self.rotary(self.rms_norm(x, weight, eps, offset), cos, sin)
        return layer_ops.rms_norm_rotary(self.lib, x, weight, eps, offset, cos, sin)

    def mamba2_decode(self, xbc, dt, window, params, h):  # type: ignore[no-untyped-def]
        if not params.silu:  # the native step computes silu only
            return ssd.mamba2_decode(xbc, dt, window, params, h)
        return mixer_ops.mamba2_decode(self.lib, xbc, dt, window, params, h)

    def group_gated_rms_norm(self, x, gate, weight, groups, eps, before):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or gate.dtype != torch.float32 or weight.dtype != torch.float32:
            return ssd.gated_rms_norm(x, gate, weight, groups, eps, before)
        return layer_ops.group_gated_rms_norm(self.lib, x, gate, weight, groups, eps, before)

    def decode_attention(self, q, kc, vc, context, scale, gather):  # type: ignore[no-untyped-def]
        return layer_ops.decode_attention(self.lib, q, kc, vc, context.slots, context.ends, scale)


TORCH_KERNELS = TorchKernels()
# the backends by name; the option's third value, "auto", picks native where it runs, else torch
KERNELS: dict[str, Callable[..., Kernels]] = {"native": NativeKernels, "torch": TorchKernels}
CHOICES = ("auto", *KERNELS)


class KernelsError(ValueError):
    """The kernels asked for cannot run here (one line: why)."""


@functools.cache
def native_library(cache_dir: Path, compiler: str | None) -> Built:
    """The native library, built (or found on disk) once per process, cache directory and compiler."""
    return build(cache_dir, compiler)


def native_fits(device: str, dtype: torch.dtype) -> bool:
    """Whether the native kernels can run on ``device`` in ``dtype`` (a CPU in float32). Pure."""
    return torch.device(device).type == "cpu" and dtype == torch.float32


def kernels_refusal(name: str, device: str, dtype: torch.dtype) -> str | None:
    """Why option ``kernels`` = ``name`` cannot run on ``device`` in ``dtype``, short of building
    the native library (None: it may). Pure: a fleet's ingress checks it before any replica."""
    if name not in CHOICES:
        return f"unknown kernels {name!r} (known: {', '.join(CHOICES)})"
    if name == "native" and not native_fits(device, dtype):
        named = str(dtype).removeprefix("torch.")  # as users write it: bfloat16
        return f"native kernels run on a CPU in float32, not {device} in {named}"
    return None


def resolve_kernels(
    name: str, device: str, dtype: torch.dtype, cache_dir: str | Path, compiler: str | None = None
) -> Kernels:
    """The backend for option value ``name`` on ``device`` in ``dtype``. ``auto``: native on a
    CPU in float32 when the library builds (else torch, with one log line saying why), torch
    elsewhere; ``native`` raises `KernelsError` where it cannot run. ``compiler``: a path (None:
    the system's, `find_compiler`); ``cache_dir``: where the library is built, a str or a Path."""
    refused = kernels_refusal(name, device, dtype)
    if refused is not None:
        raise KernelsError(refused)
    if name == "torch" or not native_fits(device, dtype):
        return TORCH_KERNELS
    # one Path for the per-process cache: "x" and Path("x") are the same library
    compiler = compiler if compiler is not None else find_compiler()
    built = native_library(Path(cache_dir).expanduser(), compiler)
    if built.library is not None:
        return NativeKernels(built.library)
    if name == "native":
        raise KernelsError(f"native kernels could not be built: {built.problem}")
    _log_fallback(str(built.problem))
    return TORCH_KERNELS


@functools.cache
def _log_fallback(problem: str) -> None:
    """One log line per process and cause, however many runners fall back."""
    log.warning("native kernels unavailable (%s): running the eager torch kernels", problem)
