"""The native kernels backend (`Kernels`): `native/steps.c` (CPU, float32) through its tensor
functions (`native.mixer_ops`, `native.prefill_ops`, `native.layer_ops`), falling back to the
eager steps for a dtype or a variant the library does not compute."""

from __future__ import annotations

import ctypes
import itertools

import torch

from radixflow.models.kernels import ssd, step
from radixflow.models.kernels.delta_rule import Segments
from radixflow.models.kernels.native import layer_ops, mixer_ops, prefill_ops
from radixflow.models.kernels.packed_conv import window_after_inputs
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS


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
        return self.prefill_conv(x, rows, lengths, windows, weight, None, True)

    def prefill_conv(self, x, rows, lengths, windows, weight, bias, silu):  # type: ignore[no-untyped-def]
        """`prefill_conv_silu`'s one native call, with a bias and the silu optional."""
        floats = (x, windows, weight) if bias is None else (x, windows, weight, bias)
        if any(t.dtype != torch.float32 for t in floats):  # the native kernels run float32 only
            return TORCH_KERNELS.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
        out = prefill_ops.conv_runs(self.lib, x, rows, lengths, windows, weight, bias, silu)
        firsts = [0, *itertools.accumulate(lengths)]

        def window_after(seq: int, tokens: int) -> torch.Tensor:
            return window_after_inputs(x, rows, firsts[seq], windows[seq], tokens)

        return out, window_after

    def delta_rule_prefill(self, q, k, v, g, beta, states, segs, on_save):  # type: ignore[no-untyped-def]
        """Every segment token by token in one call; the saved states handed on after it."""
        table, keys = _runs(segs)
        out, saved = prefill_ops.gated_delta_scan(self.lib, q, k, v, g, beta, table, states, len(keys))
        for i, key in enumerate(keys):
            on_save(key, saved[i])
        return out

    def mamba2_prefill(self, conv, dt, params, starts, segs, on_save, chunk):  # type: ignore[no-untyped-def]
        """Every segment token by token in one call, each initial state read where it lies; the
        saved states handed on after it."""
        floats = [conv, dt, *(s for s in starts if s is not None)]
        if any(t.dtype != torch.float32 for t in floats):  # the native kernels run float32 only
            return TORCH_KERNELS.mamba2_prefill(conv, dt, params, starts, segs, on_save, chunk)
        table, keys = _runs(segs)
        out, saved = prefill_ops.mamba2_scan(self.lib, conv, dt, params, table, starts, len(keys))
        for i, key in enumerate(keys):
            on_save(key, saved[i])
        return out

    def gated_rms_norm(self, x, gate, weight, eps):  # type: ignore[no-untyped-def]
        return layer_ops.gated_rms_norm(self.lib, x, gate, weight, eps)

    # the native norms run float32 only, where `step.NormSpec.cast_first` changes nothing
    def rms_norm(self, x, weight, spec):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or weight.dtype != torch.float32:
            return step.rms_norm(x, weight, spec)  # float32 only
        return layer_ops.rms_norm(self.lib, x, weight, spec.eps, spec.offset)

    def add_rms_norm(self, x, delta, weight, spec):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or delta.dtype != torch.float32 or weight.dtype != torch.float32:
            return TORCH_KERNELS.add_rms_norm(x, delta, weight, spec)  # float32 only
        return layer_ops.add_rms_norm(self.lib, x, delta, weight, spec.eps, spec.offset)

    def add_rms_norm_(self, x, delta, weight, spec):  # type: ignore[no-untyped-def]
        owned = x.is_contiguous() and delta.is_contiguous() and x.shape == delta.shape
        if not (x.dtype == delta.dtype == torch.float32 and owned):
            return self.add_rms_norm(x, delta, weight, spec)  # new tensors, as chosen there
        return layer_ops.add_rms_norm(self.lib, x, delta, weight, spec.eps, spec.offset, into=(x, delta))

    def relu2_(self, x):  # type: ignore[no-untyped-def]
        if x.dtype != torch.float32 or not x.is_contiguous():  # in place on float32 rows only
            return TORCH_KERNELS.relu2_(x)
        return layer_ops.relu2_(self.lib, x)

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

    def rms_norm_rotary(self, x, weight, spec, cos, sin):  # type: ignore[no-untyped-def]
        if any(t.dtype != torch.float32 for t in (x, weight, cos)):  # float32 only: the two calls
            return self.rotary(self.rms_norm(x, weight, spec), cos, sin)
        return layer_ops.rms_norm_rotary(self.lib, x, weight, spec.eps, spec.offset, cos, sin)

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


def _runs(segs: Segments) -> tuple[torch.Tensor, list[int]]:
    """The native scans' run table ``[R, 4]`` (``lo, hi, sequence, save index or -1``) of a
    round's segments, and the keys of the saving runs in save-index order."""
    runs, keys = [], []
    for b, mine in enumerate(segs):
        for lo, hi, key in mine:
            runs.append((lo, hi, b, -1 if key is None else len(keys)))
            if key is not None:
                keys.append(key)
    return torch.tensor(runs, dtype=torch.int64).view(-1, 4), keys
