"""One-token steps (`radixflow.models.kernels.step`, `ssd_step`) against the chunked kernels."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixflow.models.kernels import step
from radixflow.models.kernels.delta_rule import (
    causal_conv,
    chunked_gated_delta_rule,
    l2norm,
)
from radixflow.models.kernels.ssd import ssd_chunked, ssd_step
from radixflow.models.kernels.step import conv_step, gated_delta_step


def delta_inputs(g: torch.Generator, length: int, heads: int = 3, dk: int = 8, dv: int = 5):
    q = l2norm(torch.randn(length, heads, dk, generator=g)) * dk**-0.5
    k = l2norm(torch.randn(length, heads, dk, generator=g))
    v = torch.randn(length, heads, dv, generator=g)
    gate = -torch.rand(length, heads, generator=g) * 2
    beta = torch.rand(length, heads, generator=g)
    return q, k, v, gate, beta


@pytest.mark.parametrize("length", [1, 7, 70])
def test_delta_steps_replay_the_chunked_rule(length: int) -> None:
    g = torch.Generator().manual_seed(length)
    q, k, v, gate, beta = delta_inputs(g, length)
    s0 = torch.randn(3, 8, 5, generator=g)
    want, s_want = chunked_gated_delta_rule(q, k, v, gate, beta, s0)
    state, outs = s0[None].clone(), []
    for t in range(length):  # one row, token after token
        o, state = gated_delta_step(
            q[t : t + 1], k[t : t + 1], v[t : t + 1], gate[t : t + 1], beta[t : t + 1], state
        )
        outs.append(o[0])
    assert (torch.stack(outs) - want).abs().max() < 1e-5
    assert (state[0] - s_want).abs().max() < 1e-5


def test_delta_step_rows_are_independent_and_in_place_is_optional() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v, gate, beta = delta_inputs(g, 4)  # 4 rows of one token each
    states = torch.randn(4, 3, 8, 5, generator=g)
    before = states.clone()
    out, after = gated_delta_step(q, k, v, gate, beta, states)
    assert torch.equal(states, before)  # not in place: the input state is untouched
    for row in range(4):
        o, s = chunked_gated_delta_rule(
            q[row : row + 1],
            k[row : row + 1],
            v[row : row + 1],
            gate[row : row + 1],
            beta[row : row + 1],
            before[row],
        )
        assert (out[row] - o[0]).abs().max() < 1e-6 and (after[row] - s).abs().max() < 1e-6
    out2, same = gated_delta_step(q, k, v, gate, beta, states, in_place=True)
    assert same.data_ptr() == states.data_ptr() and torch.equal(out2, out) and torch.equal(states, after)


def test_ssd_step_matches_the_chunked_scan_and_keeps_its_input() -> None:
    g = torch.Generator().manual_seed(1)
    rows, heads, p, groups, n = 3, 4, 6, 2, 5
    x = torch.randn(rows, heads, p, generator=g)
    dt = torch.rand(rows, heads, generator=g)
    a = -torch.rand(heads, generator=g) * 3
    b, c = torch.randn(rows, groups, n, generator=g), torch.randn(rows, groups, n, generator=g)
    h = torch.randn(rows, heads, p, n, generator=g)
    before = h.clone()
    y, h1 = ssd_step(x, dt, a, b, c, h)
    assert torch.equal(h, before)
    for r in range(rows):
        sl = slice(r, r + 1)
        y_ref, h_ref = ssd_chunked(x[sl], dt[sl], a, b[sl], c[sl], before[r], 64)
        assert (y[r] - y_ref[0]).abs().max() < 1e-5 and (h1[r] - h_ref).abs().max() < 1e-5
    y2, h2 = ssd_step(x, dt, a, b, c, h, in_place=True)
    assert h2.data_ptr() == h.data_ptr() and torch.equal(y2, y) and torch.equal(h, h1)


@pytest.mark.parametrize("kernel", [1, 2, 4])
def test_conv_step_shifts_the_window_like_the_chunked_conv(kernel: int) -> None:
    g = torch.Generator().manual_seed(kernel)
    chans = 6
    x = torch.randn(3, chans, generator=g)  # three rows
    window = torch.randn(3, chans, kernel - 1, generator=g)
    weight = torch.randn(chans, kernel, generator=g)
    bias = torch.randn(chans, generator=g)
    out, new_window = conv_step(x, window, weight, bias)
    for r in range(3):
        want, padded = causal_conv(x[r : r + 1], window[r], weight)  # silu(conv), no bias
        assert (F.silu(out[r] - bias) - want[0]).abs().max() < 1e-6
        assert torch.equal(new_window[r], padded[:, 1:])


@pytest.mark.parametrize("kernel", [1, 2, 4])
def test_conv_step_in_place_shifts_the_window_where_it_lies(kernel: int) -> None:
    g = torch.Generator().manual_seed(10 + kernel)
    chans = 6
    x = torch.randn(3, chans, generator=g)
    window = torch.randn(3, chans, kernel - 1, generator=g)
    weight = torch.randn(chans, kernel, generator=g)
    out, new_window = conv_step(x, window.clone(), weight, None)
    out2, same = conv_step(x, window, weight, None, in_place=True)
    assert same.data_ptr() == window.data_ptr()
    assert torch.equal(out2, out) and torch.equal(window, new_window)


@pytest.mark.parametrize("rows_per_block", [1, 2, 3])
def test_steps_by_blocks_of_rows_equal_one_block(
    monkeypatch: pytest.MonkeyPatch, rows_per_block: int
) -> None:
    """The batched steps give each row the same bits whether the rows run as one block or as
    several (`row_blocks`; an uneven last block included), in place or not."""
    g = torch.Generator().manual_seed(rows_per_block)
    rows = 7
    q, k, v, gate, beta = delta_inputs(g, rows)
    state = torch.randn(rows, 3, 8, 5, generator=g)
    x, dt = torch.randn(rows, 4, 6, generator=g), torch.rand(rows, 4, generator=g)
    a = -torch.rand(4, generator=g)
    b, c = torch.randn(rows, 2, 5, generator=g), torch.randn(rows, 2, 5, generator=g)
    h = torch.randn(rows, 4, 6, 5, generator=g)
    whole_delta = gated_delta_step(q, k, v, gate, beta, state)
    whole_ssd = ssd_step(x, dt, a, b, c, h)
    monkeypatch.setattr(step, "BLOCK_BYTES", rows_per_block * state[0].nbytes)
    assert len(step.row_blocks(rows, state[0].nbytes)) == -(-rows // rows_per_block)
    blocked_delta = gated_delta_step(q, k, v, gate, beta, state.clone(), in_place=True)
    monkeypatch.setattr(step, "BLOCK_BYTES", rows_per_block * h[0].nbytes)
    blocked_ssd = ssd_step(x, dt, a, b, c, h.clone(), in_place=True)
    for whole, blocked in ((whole_delta, blocked_delta), (whole_ssd, blocked_ssd)):
        assert torch.equal(whole[0], blocked[0]) and torch.equal(whole[1], blocked[1])
