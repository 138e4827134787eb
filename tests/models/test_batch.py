"""Packed batches, paged KV and the state pool."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import Segment, SeqSpec, Snapshot, wave_segments


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


def test_a_waves_segments_are_rows_of_its_packed_tokens_and_only_saving_ones_have_a_key():
    a = SeqSpec(8, 9, [0, 1], snapshots=[Snapshot(17, 4), Snapshot(9, 3), Snapshot(9, 5)])
    b = SeqSpec(0, 3, [2])  # no snapshot: one segment, no key
    c = SeqSpec(4, 2, [3], restore_slot=1, snapshots=[Snapshot(6, 6)])
    segs, saves = wave_segments([a, b, c])
    assert segs == [[(0, 1, 0), (1, 9, 1)], [(9, 12, None)], [(12, 14, 2)]]
    assert saves == [(0, 1, (3, 5)), (0, 9, (4,)), (2, 2, (6,))]


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


def test_state_pool_load_reads_the_slot_where_it_lies():
    """A prefill's restored state is a view of the pool (no copy out), through the slot-to-row map."""
    pool = StatePool({3: ((2, 2), (1, 3))}, num_slots=3, dtype=torch.float32, device="cpu")
    pool.save(3, 1, (torch.ones(2, 2), torch.full((1, 3), 2.0)))
    pool._swap([1], [2])  # slot 1 now in pool row 2
    loaded = pool.load(3, 1)
    assert loaded is not None and pool.load(3, None) is None
    assert torch.equal(loaded[0], torch.ones(2, 2)) and torch.equal(loaded[1], torch.full((1, 3), 2.0))
    for view, tensor in zip(loaded, pool.tensors[3], strict=True):
        assert view.data_ptr() == tensor[2].data_ptr()


def decode_batch(specs: list[SeqSpec], state: StatePool, batched: bool = True) -> ForwardBatch:
    kv = KVPool({}, num_blocks=8, block_size=4, dtype=torch.float32, device="cpu")
    return ForwardBatch.build([([1] * s.length, s) for s in specs], kv, state, "cpu", batched)


def test_state_pool_load_many_restores_each_slot_and_zeros_fresh_rows():
    pool = StatePool({3: ((2,), (1, 2))}, num_slots=3, dtype=torch.float32, device="cpu")
    for slot in range(3):
        pool.save(3, slot, (torch.full((2,), slot + 1.0), torch.full((1, 2), -slot - 1.0)))
    windows, recs = pool.load_many(3, [2, None, 0, 2])
    assert windows[:, 0].tolist() == [3.0, 0.0, 1.0, 3.0]
    assert recs[:, 0, 0].tolist() == [-3.0, 0.0, -1.0, -3.0]
    windows.add_(10.0)  # copies: the pool is untouched
    assert pool.load(3, 2)[0].tolist() == [3.0, 3.0]
    # a decode round that updates slots 0 and 2 in place makes them one block of pool rows
    # (slot 2 moves to row 1): load_many still answers by slot
    pool4 = StatePool({3: ((2,), (1, 2))}, num_slots=4, dtype=torch.float32, device="cpu")
    for slot in range(4):
        pool4.save(3, slot, (torch.full((2,), slot + 1.0), torch.full((1, 2), -slot - 1.0)))
    pool4.place([(0, 0, 0, (0,)), (1, 1, 2, (2,))], torch.device("cpu"))
    assert pool4.rows != [0, 1, 2, 3]
    windows, _ = pool4.load_many(3, [2, None, 0, 1, 3])
    assert windows[:, 0].tolist() == [3.0, 0.0, 1.0, 2.0, 4.0]
    empty = StatePool({3: ((2,),)}, num_slots=0, dtype=torch.float32, device="cpu")
    (fresh,) = empty.load_many(3, [None, None])  # no slot at all: zeros, no index into the pool
    assert fresh.shape == (2, 2) and not fresh.any()


def test_decode_rows_are_the_one_token_chunks_unless_batching_is_off():
    state = StatePool({}, 0, torch.float32, "cpu")
    specs = [SeqSpec(0, 5, [0, 1]), SeqSpec(3, 1, [2], 0), SeqSpec(0, 1, [3]), SeqSpec(2, 2, [4], 1)]
    fb = decode_batch(specs, state)
    assert fb.decode.seqs == (1, 2) and fb.decode.tokens.tolist() == [5, 6] and fb.others == [0, 3]
    assert fb.other_tokens.tolist() == [0, 1, 2, 3, 4, 7, 8]
    off = decode_batch(specs, state, batched=False)
    assert len(off.decode) == 0 and off.others == [0, 1, 2, 3]


def test_rows_restoring_a_state_saved_in_their_round_run_in_later_waves():
    # row 0 saves slot 5; rows 2 (one token: a decode row otherwise) and 3 restore it; row 3
    # saves slot 6, which row 4 restores (a third wave); row 1 restores a slot from an earlier round
    state = StatePool({}, 0, torch.float32, "cpu")
    specs = [
        SeqSpec(0, 4, [0], snapshots=[Snapshot(4, 5)]),
        SeqSpec(3, 1, [1], 9),
        SeqSpec(4, 1, [2], 5),
        SeqSpec(4, 2, [3], 5, [Snapshot(6, 6)]),
        SeqSpec(6, 2, [4], 6),
    ]
    fb = decode_batch(specs, state)
    assert fb.decode.seqs == (1,)
    assert [(rows, tokens.tolist()) for rows, tokens in fb.waves] == [
        ([0], [0, 1, 2, 3]),
        ([2, 3], [5, 6, 7]),
        ([4], [8, 9]),
    ]
    plain = decode_batch([SeqSpec(0, 5, [0, 1]), SeqSpec(2, 2, [4], 1)], state)
    assert [(rows, tokens.tolist()) for rows, tokens in plain.waves] == [([0, 1], [0, 1, 2, 3, 4, 5, 6])]


@pytest.mark.parametrize("row_shape", [(3, 2), (64, 64, 4)])  # small rows: index_copy; large: copies
def test_gather_and_scatter_move_each_rows_state_between_its_slots(row_shape):
    pool = StatePool({5: (row_shape, (2,))}, num_slots=6, dtype=torch.float32, device="cpu")
    for t in pool.tensors[5]:
        t.copy_(torch.arange(6, dtype=torch.float32).view(6, *[1] * (t.dim() - 1)).expand_as(t))
    specs = [
        SeqSpec(7, 1, [0, 1], 4, [Snapshot(8, 5), Snapshot(8, 0)]),  # restores 4, saves twice
        SeqSpec(0, 1, [2]),  # fresh, saves nothing
        SeqSpec(3, 1, [3], 4, [Snapshot(4, 1)]),  # restores the same slot as row 0
    ]
    fb = decode_batch(specs, pool)
    big, small = pool.gather(5, fb.decode)
    assert [t.flatten()[0].item() for t in big] == [4.0, 0.0, 4.0]  # the fresh row is zeros
    assert small.tolist() == [[4.0, 4.0], [0.0, 0.0], [4.0, 4.0]]
    new = (big + torch.tensor([10.0, 20.0, 30.0]).view(3, *[1] * len(row_shape)), small + 1)
    pool.scatter(5, fb.decode, new)
    firsts = [t.flatten()[0].item() for t in pool.tensors[5][0]]
    assert firsts == [14.0, 34.0, 2.0, 3.0, 4.0, 14.0]  # slots 5 and 0 from row 0, 1 from row 2
    assert pool.tensors[5][1][:, 0].tolist() == [5.0, 5.0, 2.0, 3.0, 4.0, 5.0]
    # the scratch is reused: a smaller batch gathers into the same memory
    (one,) = (pool.gather(5, decode_batch(specs[:1], pool).decode)[0],)
    assert one.data_ptr() == big.data_ptr() and one.flatten()[0].item() == 4.0


def test_all_fresh_decode_rows_need_no_slots():
    pool = StatePool({0: ((2,),)}, num_slots=0, dtype=torch.float32, device="cpu")
    fb = decode_batch([SeqSpec(0, 1, [0]), SeqSpec(0, 1, [1])], pool)
    assert fb.decode.restore is None
    (state,) = pool.gather(0, fb.decode)
    assert state.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    pool.scatter(0, fb.decode, (state + 1,))  # nothing to save: no slot is touched


def test_batched_decode_attention_matches_one_sequence_at_a_time():
    # Decode rows with different context lengths (one of one token), next to a prefill chunk.
    heads, kv_heads, dim, block = 4, 2, 8, 4
    lengths = [9, 1, 40, 5]  # attending in two groups: (40, 9) and (5, 1)
    state = StatePool({}, 0, torch.float32, "cpu")
    outs = {}
    for batched in (True, False):
        kv = KVPool({0: (kv_heads, dim)}, num_blocks=20, block_size=block, dtype=torch.float32, device="cpu")
        g = torch.Generator().manual_seed(2)
        kv.k[0].copy_(torch.randn(kv.k[0].shape, generator=g))
        kv.v[0].copy_(torch.randn(kv.v[0].shape, generator=g))
        tables = [[3, 0, 7], [5], [1, 2, 9, 4, 12, 13, 14, 15, 16, 17], [6, 8]]
        specs = [SeqSpec(n - 1, 1, t) for n, t in zip(lengths, tables, strict=True)]
        specs.insert(2, SeqSpec(0, 6, [10, 11]))
        fb = ForwardBatch.build([([1] * s.length, s) for s in specs], kv, state, "cpu", batched)
        t = sum(s.length for s in specs)
        q, k, v = (torch.randn(t, h, dim, generator=g) for h in (heads, kv_heads, kv_heads))
        outs[batched] = paged_attention(0, q, k, v, fb, scale=dim**-0.5)
        assert len(fb.decode) == (4 if batched else 0)
        assert not batched or len(fb.decode_context) == 2
    assert (outs[True] - outs[False]).abs().max() < 1e-6


def test_decode_rows_attend_in_groups_of_similar_context_length():
    # padding a group to its longest context costs at most twice its real context, so one long
    # context among short ones does not make every row gather the long one
    state = StatePool({}, 0, torch.float32, "cpu")
    ends = (9, 400, 12, 10, 1, 900)
    specs = [SeqSpec(n - 1, 1, list(range(-(-n // 4)))) for n in ends]
    kv = KVPool({}, num_blocks=300, block_size=4, dtype=torch.float32, device="cpu")
    fb = ForwardBatch.build([([1], s) for s in specs], kv, state, "cpu")
    groups = [(g.tokens.tolist(), g.slots.shape[1]) for g in fb.decode_context]
    assert groups == [([5, 1], 900), ([2, 3, 0, 4], 12)]
    for g in fb.decode_context:
        assert g.valid.sum(1).tolist() == [ends[t] for t in g.tokens.tolist()]
        assert 2 * sum(ends[t] for t in g.tokens.tolist()) >= g.valid.numel()


def test_decode_context_slots_are_each_rows_own_table_padded_with_its_position_0():
    # what decode attention reads: a row's positions [0, end) through its own table, and past its
    # end (padding to the group's longest) its position 0's slot, a valid one that the mask hides
    state = StatePool({}, 0, torch.float32, "cpu")
    kv = KVPool({}, num_blocks=40, block_size=4, dtype=torch.float32, device="cpu")
    tables = [[7, 3, 9], [20], [12, 0, 5, 30], [2, 4], [8, 6, 1]]
    specs = [SeqSpec(10, 1, tables[0]), SeqSpec(0, 3, tables[1])]  # a prefill row among them
    specs += [SeqSpec(n - 1, 1, t) for n, t in zip((14, 6, 9), tables[2:], strict=True)]
    fb = ForwardBatch.build([([1] * s.length, s) for s in specs], kv, state, "cpu")
    seq_of = {fb.offsets[i]: s for i, s in enumerate(specs)}
    seen = 0
    for g in fb.decode_context:
        for row, token in enumerate(g.tokens.tolist()):
            s = seq_of[token]
            own = kv.slots(s.block_table, 0, s.end, torch.device("cpu")).tolist()
            assert g.slots[row].tolist() == own + own[:1] * (g.slots.shape[1] - s.end)
            seen += 1
    assert seen == 4


def test_a_block_table_too_short_for_its_chunk_is_refused():
    kv = KVPool({0: (1, 2)}, num_blocks=4, block_size=4, dtype=torch.float32, device="cpu")
    state = StatePool({}, 0, torch.float32, "cpu")
    fb = ForwardBatch.build([([1] * 5, SeqSpec(0, 5, [2]))], kv, state, "cpu")
    with pytest.raises(ValueError, match="does not cover position 4"):
        _ = fb.new_slots
