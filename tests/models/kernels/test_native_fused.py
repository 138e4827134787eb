"""The fused native steps against their eager references: the Mamba2 decode step, the grouped
gated norm, the rotary embedding and the KV write.

`ssd.mamba2_decode` (conv step, activation, dt, recurrence, D skip) and `ssd.gated_rms_norm`
must be matched within float32 rounding at the edges: one row, many rows, grouped B/C, head
sizes that are not a multiple of a register, a conv with and without bias, a dt clamp that
bites, inputs that are column views of a projection, and a NaN that stays in its own row; a
non-silu activation runs the eager chain. The rotary embedding and the KV write do the eager
arithmetic (or copies) and must be equal to the bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixflow.models.kernels.ssd import Mamba2Step
from radixflow.models.kernels.step import NormSpec
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS

TOL = 1e-5


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = TOL) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tol * (1 + b.abs())).all())


def _case(rows: int, heads: int, groups: int, p: int, n: int, taps: int, bias: bool, seed: int):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    conv_dim = heads * p + 2 * groups * n
    proj = torch.randn(rows, 3 + conv_dim + heads + 2, generator=g)
    xbc, dt = proj[:, 3 : 3 + conv_dim], proj[:, 3 + conv_dim : 3 + conv_dim + heads]  # views
    window = torch.randn(rows, conv_dim, taps - 1, generator=g)
    h = torch.randn(rows, heads, p, n, generator=g)
    params = Mamba2Step(
        heads=heads,
        head_dim=p,
        groups=groups,
        d_state=n,
        conv_weight=torch.randn(conv_dim, taps, generator=g) * 0.5,
        conv_bias=torch.randn(conv_dim, generator=g) if bias else None,
        dt_bias=torch.randn(heads, generator=g),
        a_log=torch.randn(heads, generator=g),
        d=torch.randn(heads, generator=g),
        dt_min=0.05,
        dt_max=1.5,  # both ends of the clamp are reached by these dt
        act=F.silu,
        silu=True,
    )
    return xbc, dt, window, params, h


@pytest.mark.parametrize(
    ("rows", "heads", "groups", "p", "n", "taps", "bias"),
    [
        (1, 2, 1, 8, 16, 4, True),
        (32, 4, 2, 16, 32, 4, False),
        (5, 6, 3, 5, 7, 3, True),
        (2, 2, 1, 3, 9, 2, False),
        (5, 2, 1, 16000, 8, 4, True),  # a wide conv (conv_dim 32016) beside narrow states
    ],
)
def test_the_fused_decode_matches_the_eager_chain(native, rows, heads, groups, p, n, taps, bias) -> None:
    xbc, dt, window, params, h = _case(rows, heads, groups, p, n, taps, bias, seed=rows + p)
    want_w, want_h = window.clone(), h.clone()
    want_y, want_h = TORCH_KERNELS.mamba2_decode(xbc, dt, want_w, params, want_h)
    got_y, got_h = native.mamba2_decode(xbc, dt, window, params, h)
    assert got_h is h and _close(got_y, want_y) and _close(got_h, want_h)
    assert torch.equal(window, want_w)  # the window shifted in place, by copies only


def test_a_nan_stays_in_its_own_row(native) -> None:
    xbc, dt, window, params, h = _case(4, 2, 1, 8, 8, 4, True, seed=3)
    h[2, 1, 3, 3] = float("nan")
    y, new = native.mamba2_decode(xbc, dt, window, params, h)
    assert y[2].isnan().any() and new[2].isnan().any()
    assert not y[[0, 1, 3]].isnan().any() and not new[[0, 1, 3]].isnan().any()


def test_another_activation_runs_the_eager_chain(native) -> None:
    xbc, dt, window, params, h = _case(3, 2, 1, 4, 8, 4, False, seed=5)
    relu = Mamba2Step(**{**params.__dict__, "act": F.relu, "silu": False})
    want_y, _ = TORCH_KERNELS.mamba2_decode(xbc, dt, window.clone(), relu, h.clone())
    got_y, _ = native.mamba2_decode(xbc, dt, window, relu, h)
    assert torch.equal(got_y, want_y)


@pytest.mark.parametrize("before", [False, True])
@pytest.mark.parametrize(("vectors", "dim", "groups"), [(1, 8, 1), (32, 1024, 8), (3, 15, 3)])
def test_the_grouped_gated_norm_matches_the_eager_norm(native, vectors, dim, groups, before) -> None:
    g = torch.Generator().manual_seed(dim + groups)
    x = torch.randn(vectors, dim, generator=g)
    gate = torch.randn(vectors, dim + 3, generator=g)[:, 2 : 2 + dim] * 4  # a projection's columns
    weight = torch.randn(dim, generator=g)
    want = TORCH_KERNELS.group_gated_rms_norm(x, gate, weight, groups, 1e-5, before)
    assert _close(native.group_gated_rms_norm(x, gate, weight, groups, 1e-5, before), want)
    assert _close(native.group_gated_rms_norm(x, gate.contiguous(), weight, groups, 1e-5, before), want)


@pytest.mark.parametrize(
    ("tokens", "heads", "dim", "rot"), [(1, 2, 8, 8), (32, 8, 128, 128), (5, 3, 64, 16), (3, 2, 6, 4)]
)
def test_the_rotary_equals_the_eager_rotary(native, tokens, heads, dim, rot) -> None:
    """The eager products and sum, in the same order: equal to the bit, also for a view of a
    wider projection (a token stride) and a partial rotation (the rest copied)."""
    g = torch.Generator().manual_seed(tokens + rot)
    x = torch.randn(tokens, heads, 2 * dim, generator=g)[:, :, :dim]  # heads not together: copied
    wide = torch.randn(tokens, heads * dim + 3, generator=g)[:, 1 : 1 + heads * dim].view(tokens, heads, dim)
    angles = torch.randn(tokens, 1, rot // 2, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, dim=-1), torch.cat([angles.sin()] * 2, dim=-1)
    for inp in (x, wide):
        assert torch.equal(native.rotary(inp, cos, sin), TORCH_KERNELS.rotary(inp, cos, sin))


@pytest.mark.parametrize(
    ("tokens", "heads", "dim", "rot", "offset"),
    [
        (1, 2, 8, 8, 0.0),
        (32, 8, 128, 128, 0.0),
        (32, 4, 128, 128, 1.0),
        (5, 3, 64, 16, 1.0),
        (3, 2, 6, 4, 0.0),
    ],
)
def test_the_norm_and_rotary_call_equals_the_two_calls(native, tokens, heads, dim, rot, offset) -> None:
    """A per-head q/k norm and the rotation after it in one call: equal to the bit to the native
    norm then the native rotation, also on a view whose heads do not lie together (Qwen3-Next's
    query beside its gate) and one with a token stride; within float32 rounding of the eager
    ops (whose norm sums in another order)."""
    g = torch.Generator().manual_seed(tokens + heads + rot)
    dense = torch.randn(tokens, heads, dim, generator=g)
    gated = torch.randn(tokens, heads, 2 * dim, generator=g)[:, :, :dim]  # heads not together
    wide = torch.randn(tokens, heads * dim + 3, generator=g)[:, 1 : 1 + heads * dim].view(tokens, heads, dim)
    weight = torch.randn(dim, generator=g)
    angles = torch.randn(tokens, 1, rot // 2, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, dim=-1), torch.cat([angles.sin()] * 2, dim=-1)
    for x in (dense, gated, wide):
        got = native.rms_norm_rotary(x, weight, NormSpec(1e-6, offset), cos, sin)
        assert torch.equal(got, native.rotary(native.rms_norm(x, weight, NormSpec(1e-6, offset)), cos, sin))
        assert _close(got, TORCH_KERNELS.rms_norm_rotary(x, weight, NormSpec(1e-6, offset), cos, sin), 1e-5)
    assert TORCH_KERNELS.rms_norm_rotary(dense, weight, NormSpec(1e-6, offset), cos, sin).equal(
        TORCH_KERNELS.rotary(TORCH_KERNELS.rms_norm(dense, weight, NormSpec(1e-6, offset)), cos, sin)
    )


@pytest.mark.parametrize(("kv_heads", "dim"), [(4, 128), (2, 64), (3, 5)])  # 3 x 5: not a register
def test_the_kv_write_equals_the_index_copy(native, kv_heads, dim) -> None:
    g = torch.Generator().manual_seed(dim)
    kc, vc = torch.randn(64, kv_heads, dim, generator=g), torch.randn(64, kv_heads, dim, generator=g)
    k = torch.randn(5, kv_heads, dim, generator=g)
    v = torch.randn(5, kv_heads, 2 * dim, generator=g)[..., :dim]  # a view, as a projection's split
    slots = torch.tensor([7, 0, 63, 20, 21])
    want_k, want_v = kc.clone(), vc.clone()
    TORCH_KERNELS.kv_write(want_k, want_v, slots, k, v)
    native.kv_write(kc, vc, slots, k, v)
    assert torch.equal(kc, want_k) and torch.equal(vc, want_v)
