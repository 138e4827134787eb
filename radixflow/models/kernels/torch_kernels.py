"""The eager kernels backend (`Kernels`): `kernels.step`, `kernels.ssd`, one fused SDPA call over
a gathered context, the packed conv and the chunked delta rule. The reference every other
backend is tested against, and the one that runs off a CPU or in another dtype than float32."""

from __future__ import annotations

import functools

import torch.nn.functional as F

from radixflow.models.kernels import ssd, step
from radixflow.models.kernels.delta_rule import gated_delta_rule_segments
from radixflow.models.kernels.packed_conv import PackedConv, conv1d_runs


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

    def prefill_conv(self, x, rows, lengths, windows, weight, bias, silu):  # type: ignore[no-untyped-def]
        """The sequences behind their windows, channel-major, one depthwise conv1d over them all."""
        out, window_after = conv1d_runs(x, rows, lengths, windows, weight, bias)
        return F.silu(out) if silu else out, window_after

    def delta_rule_prefill(self, q, k, v, g, beta, states, segs, on_save):  # type: ignore[no-untyped-def]
        return gated_delta_rule_segments(q, k, v, g, beta, states, segs, on_save)

    def mamba2_prefill(self, conv, dt, params, starts, segs, on_save, chunk):  # type: ignore[no-untyped-def]
        return ssd.mamba2_segments(conv, dt, params, starts, segs, on_save, chunk)

    def gated_rms_norm(self, x, gate, weight, eps):  # type: ignore[no-untyped-def]
        return step.gated_rms_norm(x, gate, weight, eps)

    def rms_norm(self, x, weight, spec):  # type: ignore[no-untyped-def]
        return step.rms_norm(x, weight, spec)

    def add_rms_norm(self, x, delta, weight, spec):  # type: ignore[no-untyped-def]
        total = x + delta
        return total, step.rms_norm(total, weight, spec)

    def add_rms_norm_(self, x, delta, weight, spec):  # type: ignore[no-untyped-def]
        if x.dtype != delta.dtype or x.shape != delta.shape:  # x + delta would promote or broadcast
            return self.add_rms_norm(x, delta, weight, spec)
        total = x.add_(delta)  # the same sum, written into x
        return total, step.rms_norm(total, weight, spec)

    def relu2_(self, x):  # type: ignore[no-untyped-def]
        return F.relu_(x).square_()

    def ssd_step(self, x, dt, a, b, c, h):  # type: ignore[no-untyped-def]
        return ssd.ssd_step(x, dt, a, b, c, h, in_place=True)

    def mamba2_decode(self, xbc, dt, window, params, h):  # type: ignore[no-untyped-def]
        return ssd.mamba2_decode(xbc, dt, window, params, h)

    def rotary(self, x, cos, sin):  # type: ignore[no-untyped-def]
        return step.rotary(x, cos, sin)

    def rms_norm_rotary(self, x, weight, spec, cos, sin):  # type: ignore[no-untyped-def]
        return step.rotary(step.rms_norm(x, weight, spec), cos, sin)

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


TORCH_KERNELS = TorchKernels()
