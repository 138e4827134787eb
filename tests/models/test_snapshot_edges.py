"""Snapshot edge cases of every hybrid family's recurrent mixer, against one full prefill.

A chunk that ends on a checkpoint position carries two snapshots there (the checkpoint slot and
the working slot); a checkpoint can sit on the chunk's first token, on a block boundary, or in a
chunk of one token. Each saved slot must hold exactly the state a plain prefill has at that
position: continuing from it reproduces the reference logits (the eager plain prefill), with
each kernels backend.
"""

from __future__ import annotations

import pytest
import torch
from model_utils import BLOCK, TOL, Pools, assert_same_top1, one_thread, prompt, run  # noqa: F401 (fixture)

from radixflow.models.kernels.delta_rule import chunked_gated_delta_rule
from radixflow.models.kernels.ssd import ssd_chunked
from radixflow.models.layers import Config
from radixflow.models.registry import model_class
from radixflow.models.seq_spec import SeqSpec, Snapshot
from radixflow.models.zoo_catalogue import FAMILY_SOURCES, preset_config

pytestmark = pytest.mark.usefixtures("one_thread")

HYBRIDS = ["qwen3_5", "qwen3_next", "lfm2", "nemotron_h", "falcon_h1"]
N = 40  # prompt length: two full blocks and a partial one


@pytest.fixture(scope="module", params=HYBRIDS)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    import importlib

    config = preset_config(f"{request.param}-tiny")
    net = model_class(config["model_type"])(Config(config))
    module = importlib.import_module(FAMILY_SOURCES[request.param][0])
    module.init_weights(net, torch.Generator().manual_seed(0))
    return net.eval()


@pytest.fixture(scope="module")
def tokens() -> list[int]:
    return prompt(7, N)


@pytest.fixture(scope="module")
def expected(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    pools = Pools(model)
    return run(model, pools, [(tokens, SeqSpec(0, N, pools.blocks(N)))])[0]


def close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert (got - want).abs().max().item() <= TOL
    assert_same_top1(got, want)


def test_every_snapshot_of_a_chunk_restores_the_prefill_state(model, tokens, expected, kernels):
    # Snapshots on the first token, on a block boundary, and twice on the chunk's end.
    pools = Pools(model, kernels=kernels)
    first = pools.blocks(32)
    snaps = [Snapshot(1, 0), Snapshot(16, 1), Snapshot(32, 2), Snapshot(32, 3)]
    (head,) = run(model, pools, [(tokens[:32], SeqSpec(0, 32, first, snapshots=snaps))])
    close(head, expected[:32])
    conts = [
        (1, 0, pools.copy_blocks(first[:1]) + pools.blocks(N - BLOCK)),
        (16, 1, first[:1] + pools.blocks(N - BLOCK)),
        (32, 2, first + pools.blocks(N - 32)),
        (32, 3, first + pools.blocks(N - 32)),
    ]
    outs = run(model, pools, [(tokens[s:], SeqSpec(s, N - s, table, slot)) for s, slot, table in conts])
    for (start, _, _), out in zip(conts, outs, strict=True):
        close(out, expected[start:])


def test_one_token_chunks_save_the_state_into_every_slot(model, tokens, expected, kernels):
    # Two one-token chunks in one round (Mamba2's vectorised decode path), one with two snapshots.
    pools = Pools(model, kernels=kernels)
    first = pools.blocks(32)
    run(model, pools, [(tokens[:32], SeqSpec(0, 32, first, snapshots=[Snapshot(32, 0)]))])
    tables = [first + pools.blocks(N - 32), first + pools.blocks(N - 32)]
    singles = [
        (tokens[32:33], SeqSpec(32, 1, tables[0], 0, [Snapshot(33, 1), Snapshot(33, 2)])),
        (tokens[32:33], SeqSpec(32, 1, tables[1], 0, [Snapshot(33, 3)])),
    ]
    for out in run(model, pools, singles):
        close(out, expected[32:33])
    alone = [(tokens[32:33], SeqSpec(32, 1, tables[0], 0, [Snapshot(33, 4)]))]  # the per-sequence path
    close(run(model, pools, alone)[0], expected[32:33])
    rest = [(tokens[33:], SeqSpec(33, N - 33, tables[i % 2], slot)) for i, slot in enumerate((1, 2, 3, 4))]
    for out in run(model, pools, rest):
        close(out, expected[33:])


def test_followers_restore_what_their_producer_saves_earlier_in_the_same_round(
    model, tokens, expected, kernels
):
    # One round: a producer saves at 16 and 32; followers restore those slots in the same round,
    # one of them a single token (a decode-shaped row), one a follower of a follower (a third
    # wave), and an independent row sits between them. Each equals the plain prefill.
    pools = Pools(model, kernels=kernels)
    first = pools.blocks(32)
    chain = first[:1] + pools.blocks(16)  # [16, 32) of its own, then the second follower's table
    single = first + pools.blocks(N - 32)  # the one-token follower's: it writes position 32
    rows = [
        (tokens[:32], SeqSpec(0, 32, first, snapshots=[Snapshot(16, 0), Snapshot(32, 1)])),
        (tokens[32:], SeqSpec(32, N - 32, first + pools.blocks(N - 32), 1)),
        (tokens[:8], SeqSpec(0, 8, pools.blocks(8))),
        (tokens[32:33], SeqSpec(32, 1, single, 1, [Snapshot(33, 3)])),
        (tokens[16:32], SeqSpec(16, 16, chain, 0, [Snapshot(32, 2)])),
        (tokens[32:], SeqSpec(32, N - 32, chain + pools.blocks(N - 32), 2)),
    ]
    outs = run(model, pools, rows)
    for (_, spec), out in zip(rows, outs, strict=True):
        close(out, expected[spec.start : spec.end])
    # the one-token follower saved the state after 33: a later round continues from it
    (rest,) = run(model, pools, [(tokens[33:], SeqSpec(33, N - 33, single, 3))])
    close(rest, expected[33:])


def test_short_candidates_after_one_checkpoint_save_a_state_after_every_token(
    model, tokens, expected, kernels
):
    # One round of many candidates resuming from one checkpoint (the scoring round: one conv
    # call a layer for all of them): 1 token, fewer tokens than any conv window, and longer,
    # each saving after every token (a segment per token). Every output equals the plain
    # prefill, and so does continuing from every saved state in a round of its own.
    pools = Pools(model, num_slots=1 + sum(range(1, 8)), kernels=kernels)
    first = pools.blocks(32)
    run(model, pools, [(tokens[:32], SeqSpec(0, 32, first, snapshots=[Snapshot(32, 0)]))])
    rows, conts, slot = [], [], 1
    for n in (1, 2, 3, 4, 7, 1, 2):
        table = first + pools.blocks(N - 32)
        snaps = [Snapshot(32 + t, slot + t - 1) for t in range(1, n + 1)]
        rows.append((tokens[32 : 32 + n], SeqSpec(32, n, table, 0, snaps)))
        conts += [(32 + t, slot + t - 1, table) for t in range(1, n + 1)]
        slot += n
    for (_, spec), out in zip(rows, run(model, pools, rows), strict=True):
        close(out, expected[spec.start : spec.end])
    outs = run(model, pools, [(tokens[p:], SeqSpec(p, N - p, pools.copy_blocks(t), s)) for p, s, t in conts])
    for (start, _, _), out in zip(conts, outs, strict=True):
        close(out, expected[start:])


def test_a_snapshot_at_the_chunk_start_or_past_its_end_is_refused():
    with pytest.raises(ValueError, match="outside the chunk"):
        SeqSpec(16, 8, [0, 1], snapshots=[Snapshot(16, 0)])
    with pytest.raises(ValueError, match="outside the chunk"):
        SeqSpec(16, 8, [0, 1], snapshots=[Snapshot(25, 0)])
    with pytest.raises(ValueError, match="at least one token"):
        SeqSpec(16, 0, [0, 1])


def test_recurrent_kernels_leave_the_state_alone_on_zero_tokens():
    state = torch.randn(2, 4, 3)
    qk, v, gb = torch.zeros(0, 2, 4), torch.zeros(0, 2, 3), torch.zeros(0, 2)
    out, after = chunked_gated_delta_rule(qk, qk, v, gb, gb, state)
    assert out.shape == (0, 2, 3) and torch.equal(after, state)
    h0 = torch.randn(4, 2, 3)
    bc = torch.zeros(0, 2, 3)
    y, h = ssd_chunked(torch.zeros(0, 4, 2), torch.zeros(0, 4), -torch.ones(4), bc, bc, h0, 64)
    assert y.shape == (0, 4, 2) and torch.equal(h, h0)
