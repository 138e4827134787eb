"""The packed depthwise conv over several sequences equals the per-sequence conv of each."""

from __future__ import annotations

import pytest
import torch

from radixflow.models.kernels.delta_rule import causal_conv
from radixflow.models.kernels.packed_conv import PackedConv


@pytest.mark.parametrize("lengths", [[1], [1, 1, 1], [5, 1, 17, 3], [64, 2], [130]])
@pytest.mark.parametrize("kernel", [2, 4])
def test_packed_conv_matches_each_sequence(lengths: list[int], kernel: int) -> None:
    g = torch.Generator().manual_seed(len(lengths) * 100 + kernel)
    channels = 24
    weight = torch.randn(channels, kernel, generator=g)
    x = torch.randn(sum(lengths), channels, generator=g)
    windows = torch.randn(len(lengths), channels, kernel - 1, generator=g)
    packed = PackedConv.build(lengths, kernel - 1, torch.device("cpu"))
    buf = packed.pack(x, windows)
    got = packed.conv(buf, weight)
    assert got.shape == x.shape
    lo = 0
    for i, length in enumerate(lengths):
        want, padded = causal_conv(x[lo : lo + length], windows[i], weight)
        torch.testing.assert_close(got[lo : lo + length], want, rtol=1e-6, atol=1e-6)
        for t in range(length + 1):  # the conv state after every prefix, as the padded input has it
            assert torch.equal(packed.window_after(buf, i, t), padded[:, t : t + kernel - 1])
        lo += length


def test_windows_do_not_leak_between_sequences() -> None:
    """A sequence's outputs depend on its own window and inputs only, not its neighbours'."""
    weight = torch.ones(3, 4)
    lengths = [2, 2]
    x = torch.zeros(4, 3)
    windows = torch.zeros(2, 3, 3)
    windows[0] = 100.0  # only the first sequence's state is non-zero
    packed = PackedConv.build(lengths, 3, torch.device("cpu"))
    out = packed.conv(packed.pack(x, windows), weight)
    assert torch.all(out[:2] > 0)
    assert torch.equal(out[2:], torch.zeros(2, 3))  # silu(0) = 0: nothing of sequence 0 arrived


def test_windows_given_in_another_order_land_behind_their_own_sequence() -> None:
    g = torch.Generator().manual_seed(7)
    lengths, kernel, channels = [3, 1, 6], 4, 5
    x = torch.randn(sum(lengths), channels, generator=g)
    windows = torch.randn(len(lengths), channels, kernel - 1, generator=g)
    packed = PackedConv.build(lengths, kernel - 1, torch.device("cpu"))
    order = [2, 0, 1]
    shuffled = packed.pack(x, windows[order], order)
    assert torch.equal(shuffled, packed.pack(x, windows))
