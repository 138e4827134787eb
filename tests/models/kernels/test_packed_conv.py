"""The packed depthwise conv over several sequences equals the per-sequence conv of each (the
multiply-add form of the Gated DeltaNet prefill, and the conv1d form of the Mamba2 and
short-conv prefill)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixflow.models.kernels.delta_rule import causal_conv
from radixflow.models.kernels.packed_conv import PackedConv
from radixflow.models.kernels.ssd import causal_conv as ssd_conv
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS


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


@pytest.mark.parametrize("lengths", [[1], [2], [3], [1, 1, 1], [5, 1, 17, 3], [24] * 16, [130]])
@pytest.mark.parametrize("kernel", [2, 4])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("silu", [False, True])
def test_the_eager_prefill_conv_is_each_sequence_s_conv1d_to_the_bit(lengths, kernel, with_bias, silu):
    """`TorchKernels.prefill_conv` (the Mamba2 and short-conv prefill's reference): one conv1d
    over the packed wave gives each sequence's own `ssd.causal_conv` (+ silu), bit for bit, from
    rows picked out of a wider projection in no order; every window a save may ask for (after
    each token, reaching back into the old window for fewer tokens than it) equals that conv's.
    The channels fill whole SIMD vectors, as every model's do: torch's silu rounds a ragged tail
    of a row differently by layout (within an ulp)."""
    g = torch.Generator().manual_seed(len(lengths) * 10 + kernel)
    tokens, channels = sum(lengths), 32
    x = torch.randn(tokens + 4, channels + 3, generator=g)[:, 2 : 2 + channels]
    rows = torch.randperm(tokens + 4, generator=g)[:tokens]
    windows = torch.randn(len(lengths), channels, kernel - 1, generator=g)
    weight = torch.randn(channels, kernel, generator=g)
    bias = torch.randn(channels, generator=g) if with_bias else None
    got, after = TORCH_KERNELS.prefill_conv(x, rows, lengths, windows, weight, bias, silu)
    lo = 0
    for i, length in enumerate(lengths):
        mine = x[rows[lo : lo + length]]
        want, _ = ssd_conv(mine, windows[i], weight, bias)
        assert torch.equal(got[lo : lo + length], F.silu(want) if silu else want), i
        for t in range(1, length + 1):
            _, window = ssd_conv(mine[:t], windows[i], weight, bias)
            assert torch.equal(after(i, t), window), (i, t)
        lo += length
