"""Packed batches, paged KV and the state pool."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from radixflow.models.batch import (
    ForwardBatch,
    KVPool,
    Segment,
    SeqSpec,
    Snapshot,
    StatePool,
    paged_attention,
)


def test_segments_split_at_snapshots():
    spec = SeqSpec(
        start=32, length=40, block_table=[0, 1, 2, 3, 4], snapshots=[Snapshot(48, 5), Snapshot(64, 6)]
    )
    assert spec.segments() == [Segment(0, 16, (5,)), Segment(16, 32, (6,)), Segment(32, 40)]
    assert SeqSpec(0, 16, [0], snapshots=[Snapshot(16, 1)]).segments() == [Segment(0, 16, (1,))]


def test_snapshots_sharing_a_position_share_one_segment_never_an_empty_one():
    # A chunk ending on a checkpoint: the checkpoint slot and the working slot at the same end.
    spec = SeqSpec(0, 32, [0, 1], snapshots=[Snapshot(16, 2), Snapshot(32, 0), Snapshot(32, 1)])
    assert spec.segments() == [Segment(0, 16, (2,)), Segment(16, 32, (0, 1))]
    ragged = SeqSpec(8, 9, [0, 1], snapshots=[Snapshot(17, 4), Snapshot(9, 3), Snapshot(9, 5)])
    assert ragged.segments() == [Segment(0, 1, (3, 5)), Segment(1, 9, (4,))]
    assert all(seg.lo < seg.hi for seg in spec.segments() + ragged.segments())


def test_paged_attention_matches_dense_causal_attention_across_rounds():
    torch.manual_seed(0)
    heads, kv_heads, dim, n = 4, 2, 8, 40
    q, k, v = torch.randn(n, heads, dim), torch.randn(n, kv_heads, dim), torch.randn(n, kv_heads, dim)
    kv = KVPool({0: (kv_heads, dim)}, num_blocks=8, block_size=16, dtype=torch.float32, device="cpu")
    state = StatePool({}, 0, torch.float32, "cpu")
    table = [5, 2, 7]  # scattered blocks
    outs = []
    for lo, hi in [(0, 16), (16, 40)]:  # second round reads KV written by the first
        spec = SeqSpec(lo, hi - lo, table)
        fb = ForwardBatch.build([(list(range(hi - lo)), spec)], kv, state, "cpu")
        outs.append(paged_attention(0, q[lo:hi], k[lo:hi], v[lo:hi], fb, scale=dim**-0.5))
    got = torch.cat(outs)
    kk = k.repeat_interleave(2, dim=1).transpose(0, 1)
    vv = v.repeat_interleave(2, dim=1).transpose(0, 1)
    want = F.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, is_causal=True).transpose(0, 1)
    assert torch.allclose(got, want, atol=1e-5)


def test_state_pool_load_is_a_copy():
    pool = StatePool({3: ((2, 2),)}, num_slots=2, dtype=torch.float32, device="cpu")
    pool.save(3, 1, (torch.ones(2, 2),))
    loaded = pool.load(3, 1)
    assert loaded is not None
    loaded[0].add_(1)
    assert torch.equal(pool.tensors[3][0][1], torch.ones(2, 2))
    assert pool.load(3, None) is None
