"""The native delta-rule prefill (token by token) against the eager chunked prefill, at the edges.

`NativeKernels.delta_rule_prefill` runs every segment of a round token by token; the eager
reference (`delta_rule.gated_delta_rule_segments`) runs them in chunks. They must agree within
float32 rounding on the outputs and on every saved state, for one-token segments, segments that
end on a chunk boundary of every chunk length, several segments per sequence, grouped and
ungrouped key heads, odd head sizes and zero initial states; a NaN stays in its own sequence.
Token by token, the scan is the native decode step applied once per token: equal to the bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.models.kernels.delta_rule import Segments, expand_key_heads
from radixflow.models.kernels.ssd import Mamba2Step
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS

TOL = 2e-5


def _inputs(seed: int, rows: int, key_heads: int, heads: int, dk: int, dv: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(rows, key_heads, dk, generator=g), dim=-1) * dk**-0.5
    k = F.normalize(torch.randn(rows, key_heads, dk, generator=g), dim=-1)
    v = torch.randn(rows, heads, dv, generator=g)
    gate, beta = -torch.rand(rows, heads, generator=g) * 2, torch.rand(rows, heads, generator=g)
    return [q, k, v, gate, beta]


def _layout(lengths: list[list[int]]) -> tuple[Segments, int]:
    """Every segment saves (keys in order), so each sequence's final state is compared too."""
    segs, base, key = [], 0, 0
    for mine in lengths:
        out = []
        for n in mine:
            out.append((base, base + n, key))
            base, key = base + n, key + 1
        segs.append(out)
    return segs, base


def _prefill(kernels, inputs, states, segs) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    saved: dict[int, torch.Tensor] = {}
    keep = lambda key, s: saved.__setitem__(key, s.clone())  # noqa: E731
    out = kernels.delta_rule_prefill(*inputs, states.clone(), segs, keep)
    return out, saved


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= TOL * (1 + b.abs())).all())


LAYOUTS = [
    [[1]],  # one token
    [[1], [1], [1]],  # one-token prompts side by side
    [[16], [32], [64]],  # each ends on a chunk boundary of one of the chunk lengths
    [[64, 64], [128]],  # segments on chunk boundaries, the state carried across them
    [[5, 70], [1], [13, 2, 9], [64]],
    [[24]] * 15,  # the scoring benchmark's candidate round
    [[400, 24]],  # a context saved at its branch point, then a candidate
]


@pytest.mark.parametrize("lengths", LAYOUTS)
@pytest.mark.parametrize(("key_heads", "heads", "dk", "dv"), [(2, 4, 16, 16), (3, 3, 7, 5), (1, 2, 64, 64)])
def test_the_scan_matches_the_chunked_prefill(native, lengths, key_heads, heads, dk, dv) -> None:
    segs, rows = _layout(lengths)
    inputs = _inputs(rows + heads, rows, key_heads, heads, dk, dv)
    states = torch.randn(len(lengths), heads, dk, dv, generator=torch.Generator().manual_seed(5)) * 0.3
    states[0] = 0  # a sequence from scratch
    want_o, want_s = _prefill(TORCH_KERNELS, inputs, states, segs)
    got_o, got_s = _prefill(native, inputs, states, segs)
    assert _close(got_o, want_o)
    assert sorted(got_s) == sorted(want_s) == list(range(sum(len(m) for m in lengths)))
    for key, want in want_s.items():
        assert _close(got_s[key], want), key


def test_the_states_given_are_stepped_in_place_and_segments_without_a_key_save_nothing(native) -> None:
    segs: Segments = [[(0, 3, None), (3, 9, None)], [(9, 10, None)]]
    inputs = _inputs(1, 10, 2, 2, 8, 8)
    states = torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(2))
    saved: dict[int, torch.Tensor] = {}
    want_segs: Segments = [[(0, 3, None), (3, 9, 0)], [(9, 10, 1)]]
    want_o, want_s = _prefill(TORCH_KERNELS, inputs, states, want_segs)
    work = states.clone()
    out = native.delta_rule_prefill(*inputs, work, segs, lambda key, s: saved.__setitem__(key, s))
    assert not saved and _close(out, want_o)
    assert _close(work[0], want_s[0]) and _close(work[1], want_s[1])


def test_the_scan_equals_the_native_decode_step_token_by_token(native) -> None:
    """The same arithmetic in the same order: the scan is the one-token step run per token."""
    heads, dk, dv, n = 4, 16, 16, 37
    q, k, v, gate, beta = _inputs(3, n, 2, heads, dk, dv)
    init = torch.randn(1, heads, dk, dv, generator=torch.Generator().manual_seed(4))
    got_o, got_s = _prefill(native, [q, k, v, gate, beta], init, [[(0, n, 0)]])
    state, outs = init.clone(), []
    qe, ke = expand_key_heads(q, heads), expand_key_heads(k, heads)
    for t in range(n):
        at = slice(t, t + 1)
        o, state = native.gated_delta_step(qe[at], ke[at], v[at], gate[at], beta[at], state)
        outs.append(o)
    assert torch.equal(got_o, torch.cat(outs)) and torch.equal(got_s[0], state[0])


def test_a_nan_stays_in_its_own_sequence(native) -> None:
    segs, rows = _layout([[6], [6], [6]])
    inputs = _inputs(7, rows, 2, 2, 8, 8)
    states = torch.zeros(3, 2, 8, 8)
    states[1, 0, 2, 2] = float("nan")
    out, saved = _prefill(native, inputs, states, segs)
    assert out[6:12, 0].isnan().any() and saved[1][0].isnan().any()
    assert not out[:6].isnan().any() and not out[12:].isnan().any()
    assert not saved[0].isnan().any() and not saved[2].isnan().any()


CONV_LAYOUTS = [[1], [2], [3], [5, 70, 1], [24] * 15]


@pytest.mark.parametrize("lengths", CONV_LAYOUTS)
@pytest.mark.parametrize("taps", [4, 2])
def test_the_prefill_conv_matches_the_packed_conv_and_saves_the_same_windows(native, lengths, taps) -> None:
    """The wave's rows picked out of a wider projection (a later wave's rows, not from 0, in
    no particular order; the projection a view of its columns), each sequence behind its own
    window; every window a save may ask for (after each of its tokens) read back alike."""
    g = torch.Generator().manual_seed(len(lengths) + taps)
    tokens, channels = sum(lengths), 12
    projected = torch.randn(tokens + 5, channels + 3, generator=g)
    x = projected[:, 1 : 1 + channels]
    rows = torch.randperm(tokens + 5, generator=g)[:tokens]
    windows = torch.randn(len(lengths), channels, taps - 1, generator=g)
    weight = torch.randn(channels, taps, generator=g)
    want, want_after = TORCH_KERNELS.prefill_conv_silu(x, rows, lengths, windows, weight)
    got, got_after = native.prefill_conv_silu(x, rows, lengths, windows, weight)
    assert _close(got, want)
    for seq, n in enumerate(lengths):
        for before in range(1, n + 1):
            assert torch.equal(got_after(seq, before), want_after(seq, before)), (seq, before)


@pytest.mark.parametrize("lengths", [*CONV_LAYOUTS, [1] * 16, [2, 1, 3]])
@pytest.mark.parametrize("taps", [4, 3, 2])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("silu", [False, True])
def test_the_prefill_conv_with_bias_and_without_silu_matches_the_eager_conv1d(
    native, lengths, taps, with_bias, silu
) -> None:
    """`prefill_conv` (the Mamba2 prefill: bias, silu; the short conv: neither, or a bias) native
    against the eager packed conv1d: the same outputs within float32 rounding, the same windows
    (copies of the inputs) after every token of every sequence, fewer tokens than the window
    reaching back into the old one."""
    g = torch.Generator().manual_seed(len(lengths) + 10 * taps)
    tokens, channels = sum(lengths), 37
    projected = torch.randn(tokens + 5, channels + 3, generator=g)
    x = projected[:, 2 : 2 + channels]
    rows = torch.randperm(tokens + 5, generator=g)[:tokens]
    windows = torch.randn(len(lengths), channels, taps - 1, generator=g)
    weight = torch.randn(channels, taps, generator=g)
    bias = torch.randn(channels, generator=g) if with_bias else None
    want, want_after = TORCH_KERNELS.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
    got, got_after = native.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
    assert _close(got, want)
    for seq, n in enumerate(lengths):
        for before in range(1, n + 1):
            assert torch.equal(got_after(seq, before), want_after(seq, before)), (seq, before)


def test_the_prefill_conv_without_silu_is_the_silu_conv_before_its_silu_to_the_bit(native) -> None:
    """One native function behind both: the activation flag changes nothing but the silu."""
    g = torch.Generator().manual_seed(3)
    x, weight = torch.randn(9, 16, generator=g), torch.randn(16, 4, generator=g)
    rows, windows = torch.arange(9), torch.randn(2, 16, 3, generator=g)
    plain, _ = native.prefill_conv(x, rows, [4, 5], windows, weight, None, False)
    with_silu, _ = native.prefill_conv_silu(x, rows, [4, 5], windows, weight)
    assert _close(F.silu(plain), with_silu)
    assert torch.equal(native.prefill_conv(x, rows, [4, 5], windows, weight, None, True)[0], with_silu)


def test_the_prefill_conv_in_another_dtype_is_the_eager_one(native) -> None:
    """The library computes float32 only: a bfloat16 wave (bias too) runs the eager conv1d."""
    g = torch.Generator().manual_seed(4)
    x, weight = torch.randn(7, 16, generator=g).bfloat16(), torch.randn(16, 4, generator=g).bfloat16()
    windows, bias = torch.randn(2, 16, 3, generator=g).bfloat16(), torch.randn(16, generator=g).bfloat16()
    rows = torch.arange(7)
    want, want_after = TORCH_KERNELS.prefill_conv(x, rows, [3, 4], windows, weight, bias, True)
    got, got_after = native.prefill_conv(x, rows, [3, 4], windows, weight, bias, True)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert torch.equal(got_after(1, 2), want_after(1, 2))


# -- the Mamba2 prefill scan ------------------------------------------------------------------


def _mamba2(heads: int, groups: int, p: int, n: int, seed: int = 0) -> Mamba2Step:
    """Step parameters as a Mamba2 layer holds them: an identity conv (the last tap), a dt
    clamp that binds at both ends for some tokens."""
    g = torch.Generator().manual_seed(seed)
    conv_dim = heads * p + 2 * groups * n
    weight = torch.zeros(conv_dim, 4)
    weight[:, -1] = 1.0
    return Mamba2Step(
        heads=heads,
        head_dim=p,
        groups=groups,
        d_state=n,
        conv_weight=weight,
        conv_bias=None,
        dt_bias=torch.randn(heads, generator=g),
        a_log=torch.randn(heads, generator=g),
        d=torch.randn(heads, generator=g),
        dt_min=0.01,
        dt_max=2.0,
        act=F.silu,
        silu=True,
    )


def _scan(kernels, conv, dt, params, starts, segs) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """``starts``: each sequence's state, or None (zeros); asserts the call leaves them alone."""
    saved: dict[int, torch.Tensor] = {}
    keep = lambda key, s: saved.__setitem__(key, s.clone())  # noqa: E731
    before = [None if s is None else s.clone() for s in starts]
    out = kernels.mamba2_prefill(conv, dt, params, starts, segs, keep, 16)
    for s, was in zip(starts, before, strict=True):
        assert s is None or torch.allclose(s, was, rtol=0, atol=0, equal_nan=True)
    return out, saved


def _scan_inputs(seed: int, rows: int, params: Mamba2Step) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    conv_dim = params.heads * params.head_dim + 2 * params.groups * params.d_state
    return F.silu(torch.randn(rows, conv_dim, generator=g)), torch.randn(rows, params.heads, generator=g) * 2


MAMBA2_LAYOUTS = [
    *LAYOUTS,
    [[1] * 20, [3] * 7],  # many segments per sequence
]


@pytest.mark.parametrize("lengths", MAMBA2_LAYOUTS)
@pytest.mark.parametrize(("heads", "groups", "p", "n"), [(4, 2, 16, 16), (3, 3, 5, 7), (2, 1, 64, 128)])
def test_the_mamba2_scan_matches_the_chunked_prefill(native, lengths, heads, groups, p, n) -> None:
    """Chunk 16: the [16], [32], [64] and [64, 64] segments end on chunk boundaries."""
    segs, rows = _layout(lengths)
    params = _mamba2(heads, groups, p, n, seed=rows)
    conv, dt = _scan_inputs(rows + heads, rows, params)
    states = torch.randn(len(lengths), heads, p, n, generator=torch.Generator().manual_seed(5)) * 0.3
    states = [None, *states[1:]]  # a sequence from scratch; the others resume from a saved state
    want_y, want_s = _scan(TORCH_KERNELS, conv, dt, params, states, segs)
    got_y, got_s = _scan(native, conv, dt, params, states, segs)
    assert _close(got_y, want_y)
    assert sorted(got_s) == sorted(want_s) == list(range(sum(len(m) for m in lengths)))
    for key, want in want_s.items():
        assert _close(got_s[key], want), key


def test_the_mamba2_scan_saves_only_keyed_segments_and_reads_the_states_given(native) -> None:
    params = _mamba2(2, 1, 8, 8)
    conv, dt = _scan_inputs(1, 10, params)
    states = list(torch.randn(2, 2, 8, 8, generator=torch.Generator().manual_seed(2)))
    segs: Segments = [[(0, 3, None), (3, 9, 0)], [(9, 10, None)]]
    want_y, want_s = _scan(TORCH_KERNELS, conv, dt, params, states, segs)
    got_y, got_s = _scan(native, conv, dt, params, states, segs)
    assert list(got_s) == [0] and _close(got_s[0], want_s[0]) and _close(got_y, want_y)


def test_the_mamba2_scan_equals_the_native_decode_step_token_by_token(native) -> None:
    """The same arithmetic in the same order: the scan is the one-token decode step (its conv
    the identity tap here, its silu the prefill conv's) run per token, to the bit."""
    params, length = _mamba2(4, 2, 16, 16), 37
    conv_dim = params.conv_weight.shape[0]
    xbc = torch.randn(length, conv_dim, generator=torch.Generator().manual_seed(3))
    dt = torch.randn(length, params.heads, generator=torch.Generator().manual_seed(4)) * 2
    init = torch.randn(
        1, params.heads, params.head_dim, params.d_state, generator=torch.Generator().manual_seed(6)
    )
    rows, windows = torch.arange(length), torch.zeros(1, conv_dim, 3)
    conv, _ = native.prefill_conv(xbc, rows, [length], windows, params.conv_weight, None, True)
    got_y, got_s = _scan(native, conv, dt, params, [init[0]], [[(0, length, 0)]])
    h, window, outs = init.clone(), windows.clone(), []
    for t in range(length):
        y, h = native.mamba2_decode(xbc[t : t + 1], dt[t : t + 1], window, params, h)
        outs.append(y)
    assert torch.equal(got_y, torch.cat(outs)) and torch.equal(got_s[0], h[0])


def test_the_mamba2_scan_reads_dt_from_a_view_of_the_projections_columns(native) -> None:
    """The layer passes dt as columns of its in_proj output: read with its row stride."""
    segs, rows = _layout([[5, 3], [1]])
    params = _mamba2(3, 1, 8, 8)
    conv, dt = _scan_inputs(9, rows, params)
    wide = torch.cat([torch.randn(rows, 5), dt, torch.randn(rows, 2)], dim=1)
    view = wide[:, 5:8]
    assert not view.is_contiguous()
    states = [None, torch.randn(3, 8, 8)]
    want_y, want_s = _scan(native, conv, dt, params, states, segs)
    got_y, got_s = _scan(native, conv, view, params, states, segs)
    assert torch.equal(got_y, want_y) and all(torch.equal(got_s[k], want_s[k]) for k in want_s)


def test_a_nan_stays_in_its_own_sequence_of_the_mamba2_scan(native) -> None:
    segs, rows = _layout([[6], [6], [6]])
    params = _mamba2(2, 1, 8, 8)
    conv, dt = _scan_inputs(7, rows, params)
    states = torch.zeros(3, 2, 8, 8)
    states[1, 0, 2, 2] = float("nan")
    out, saved = _scan(native, conv, dt, params, list(states), segs)
    assert out[6:12].isnan().any() and saved[1][0].isnan().any()
    assert not out[:6].isnan().any() and not out[12:].isnan().any()
    assert not saved[0].isnan().any() and not saved[2].isnan().any()


def test_the_mamba2_scan_in_another_dtype_is_the_eager_one(native) -> None:
    params = _mamba2(2, 1, 8, 8)
    conv, dt = _scan_inputs(8, 9, params)
    states, segs = [torch.zeros(2, 8, 8)], [[(0, 4, 0), (4, 9, 1)]]
    got_y, got_s = _scan(native, conv.bfloat16(), dt, params, states, segs)
    want_y, want_s = _scan(TORCH_KERNELS, conv.bfloat16(), dt, params, states, segs)
    assert torch.equal(got_y, want_y) and all(torch.equal(got_s[k], want_s[k]) for k in want_s)


# -- random waves: native against eager on layouts the tables above do not list ---------------


@st.composite
def _waves(draw: st.DrawFn) -> tuple[list[list[int]], list[list[bool]]]:
    """One to five sequences of one to four segments, mostly 1-3 tokens (shorter than the conv
    window) or around a 16-token chunk; each segment saving or not."""
    lengths = draw(
        st.lists(
            st.lists(st.sampled_from([1, 1, 2, 3, 15, 16, 17]) | st.integers(1, 40), min_size=1, max_size=4),
            min_size=1,
            max_size=5,
        )
    )
    saves = [[draw(st.booleans()) for _ in mine] for mine in lengths]
    return lengths, saves


@settings(max_examples=40, deadline=None)
@given(
    wave=_waves(),
    taps=st.integers(2, 4),
    channels=st.integers(1, 40),
    with_bias=st.booleans(),
    silu=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_prefill_conv_of_random_waves_matches_the_eager_conv1d(
    native, wave, taps, channels, with_bias, silu, seed
) -> None:
    """Rows picked in any order out of a wider projection, windows and weight given as
    non-contiguous views; every window after every token of every sequence equal."""
    lengths = [sum(mine) for mine in wave[0]]
    g = torch.Generator().manual_seed(seed)
    tokens = sum(lengths)
    x = torch.randn(tokens + 3, channels + 2, generator=g)[:, 1 : 1 + channels]
    rows = torch.randperm(tokens + 3, generator=g)[:tokens]
    windows = torch.randn(len(lengths), taps - 1, channels, generator=g).transpose(1, 2)
    weight = torch.randn(taps, channels, generator=g).t()
    bias = torch.randn(channels, generator=g) if with_bias else None
    want, want_after = TORCH_KERNELS.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
    got, got_after = native.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
    assert _close(got, want)
    for seq, n in enumerate(lengths):
        for before in range(n + 1):
            assert torch.equal(got_after(seq, before), want_after(seq, before)), (seq, before)


@settings(max_examples=40, deadline=None)
@given(
    wave=_waves(),
    shape=st.sampled_from([(4, 2, 16, 16), (3, 3, 5, 7), (6, 2, 3, 1), (2, 1, 7, 17), (4, 1, 1, 8)]),
    from_pool=st.lists(st.sampled_from([None, 0, 1, 2]), min_size=5, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_the_mamba2_scan_of_random_waves_matches_the_chunked_prefill(
    native, wave, shape, from_pool, seed
) -> None:
    """Sequences from scratch or from a pool slot (several from one slot), dt a view of wider
    projection columns, segments saving or not: the same outputs and saved states."""
    lengths, keyed = wave
    segs: Segments = []
    base, key = 0, 0
    for mine, saving in zip(lengths, keyed, strict=True):
        out = []
        for n, save in zip(mine, saving, strict=True):
            out.append((base, base + n, key if save else None))
            base, key = base + n, key + save
        segs.append(out)
    params = _mamba2(*shape, seed=seed)
    conv, dt = _scan_inputs(seed, base, params)
    dt = torch.cat([torch.randn(base, 2), dt], dim=1)[:, 2:]
    pool = torch.randn(3, shape[0], shape[2], shape[3], generator=torch.Generator().manual_seed(seed)) * 0.3
    starts = [None if slot is None else pool[slot] for slot in from_pool[: len(segs)]]
    want_y, want_s = _scan(TORCH_KERNELS, conv, dt, params, starts, segs)
    got_y, got_s = _scan(native, conv, dt, params, starts, segs)
    assert _close(got_y, want_y)
    assert sorted(got_s) == sorted(want_s) == list(range(key))
    for k, want in want_s.items():
        assert _close(got_s[k], want), k
