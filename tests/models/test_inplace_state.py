"""Recurrent state updated where it lies in the pool, on every recurrent family, at the edges.

A decode row that restores a slot and saves its new state back into that slot (the engine's
working slot) is stepped on the pool's own rows (`StatePool.place`): its state is neither gathered
into scratch before the step nor copied back after it, and a checkpoint it also saves is the only
copy. A spy pool counts the rows gathered into scratch and the states copied back; every row's
logits must match a no-cache prefill of its whole sequence (within `TOL`, same top-1), and the
final pool must match the per-sequence path's (``batched_decode=False``).

The rounds hit the edges: a checkpoint saved in the same step a row decodes (then restored by a
fork the next round, beside the row still decoding past it), a row finishing mid-batch (its last
token saves nothing, so it is gathered; the next round's block has a hole), a pool with one free
slot, then none, and the in-place rows' slots scattered over the pool so that `place` has to move
them into one block.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest
import torch
from model_utils import (  # noqa: F401 (fixtures)
    BLOCK,
    TOL,
    ZOO_TINY,
    SpyPool,
    assert_same_top1,
    one_thread,
    prompt,
)

from radixflow.models.batch import ForwardBatch, StatePool
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import Config, use_kernels
from radixflow.models.registry import model_class
from radixflow.models.seq_spec import SeqSpec, Snapshot
from radixflow.models.zoo_catalogue import FAMILY_SOURCES, preset_config

pytestmark = pytest.mark.usefixtures("one_thread")

STEP_TOL = 8e-5  # batched step vs per-sequence path: as in test_batched_decode

# A, B and C decode side by side; D forks from A's checkpoint after 11 tokens, E from the one
# after 13. Every sequence fits one KV block; a fork gets a copy of A's block (COPIES).
A = prompt(1, 16)
SEQS = {
    "A": (A, [0]),
    "B": (prompt(2, 10), [1]),
    "C": (prompt(3, 12), [2]),
    "D": (A[:11] + prompt(4, 4), [3]),
    "E": (A[:13] + prompt(5, 3), [4]),
}
COPIES = {2: [(0, 3)], 4: [(0, 4)]}  # before round i: copy KV block src -> dst
NUM_BLOCKS, NUM_SLOTS = 5, 6


@dataclass(frozen=True)
class Row:
    seq: str
    start: int
    length: int
    restore: int | None
    saves: tuple[int, ...] = ()  # slots saved at the chunk's end


# Working slots: A 4, B 1, C 5, D 2, E 1 (B's, once B is gone); checkpoints: A after 11 tokens in
# 0, after 13 in 3. Slots 4 and 5 lie past the block the rows of round 1 need: `place` moves them.
ROUNDS: list[list[Row]] = [
    [Row("A", 0, 10, None, (4,)), Row("B", 0, 8, None, (1,)), Row("C", 0, 8, None, (5,))],
    # every row in place; A also saves a checkpoint in the step it decodes
    [Row("A", 10, 1, 4, (4, 0)), Row("B", 8, 1, 1, (1,)), Row("C", 8, 1, 5, (5,))],
    # B's last token saves nothing; D forks from A's checkpoint (both gathered); A decodes past
    # the checkpoint D restores; slot 3 is the one free slot
    [Row("A", 11, 1, 4, (4,)), Row("B", 9, 1, 1), Row("D", 11, 1, 0, (2,)), Row("C", 9, 1, 5, (5,))],
    # B is gone (a hole in the block); A saves a checkpoint into the last free slot as it decodes
    [Row("D", 12, 1, 2, (2,)), Row("A", 12, 1, 4, (4, 3)), Row("C", 10, 1, 5, (5,))],
    # no free slot: E forks from the new checkpoint into B's old slot; C's last token
    [Row("A", 13, 1, 4, (4,)), Row("E", 13, 1, 3, (1,)), Row("C", 11, 1, 5), Row("D", 13, 1, 2, (2,))],
    [Row("A", 14, 1, 4, (4,)), Row("D", 14, 1, 2, (2,)), Row("E", 14, 1, 1, (1,))],
]
IN_PLACE = [0, 3, 2, 3, 2, 3]  # rows per round that restore and save their own slot
GATHERED = [0, 0, 2, 0, 2, 0]  # the other decode rows
CHECKPOINTS = [0, 1, 0, 1, 0, 0]  # checkpoints saved by in-place rows


@pytest.fixture(scope="module", params=ZOO_TINY)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    family = request.param.removesuffix("-tiny")
    config = preset_config(request.param)
    net = model_class(config["model_type"])(Config(config))
    if not net.state_layout():
        pytest.skip("no recurrent state")
    importlib.import_module(FAMILY_SOURCES[family][0]).init_weights(net, torch.Generator().manual_seed(0))
    return net.eval()


def play(
    model: torch.nn.Module, batched: bool, kernels: Kernels = TORCH_KERNELS
) -> tuple[list[list[torch.Tensor]], SpyPool, list[tuple]]:
    """Run ROUNDS on fresh pools: per round, each row's logits ``[length, vocab]``, and the spy's
    counts per recurrent layer (in place, gathered, checkpoints) and its copies back."""
    use_kernels(model, kernels)  # the norms too (the model fixture is shared across backends)
    kv = KVPool(model.kv_layout(), NUM_BLOCKS, BLOCK, torch.float32, "cpu")
    state = SpyPool(model.state_layout(), NUM_SLOTS, torch.float32, "cpu")
    layers = len(model.state_layout())
    out, counts = [], []
    for i, rows in enumerate(ROUNDS):
        for src, dst in COPIES.get(i, []):
            for pool in (*kv.k.values(), *kv.v.values()):
                pool[dst * BLOCK : (dst + 1) * BLOCK] = pool[src * BLOCK : (src + 1) * BLOCK]
        chunks = []
        for r in rows:
            tokens, table = SEQS[r.seq]
            snaps = [Snapshot(r.start + r.length, slot) for slot in r.saves]
            chunks.append(
                (tokens[r.start : r.start + r.length], SeqSpec(r.start, r.length, table, r.restore, snaps))
            )
        state.reset()
        batch = ForwardBatch.build(chunks, kv, state, "cpu", batched_decode=batched, kernels=kernels)
        with torch.inference_mode():
            logits = model.compute_logits(model(batch))
        counts.append(
            (state.in_place / layers, state.gathered / layers, state.checkpoints / layers, state.copied_back)
        )
        offs = batch.offsets
        out.append([logits[offs[j] : offs[j + 1]] for j in range(len(rows))])
    return out, state, counts


def no_cache(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    use_kernels(model, TORCH_KERNELS)  # the eager reference
    kv = KVPool(model.kv_layout(), 1, BLOCK, torch.float32, "cpu")
    state = StatePool(model.state_layout(), 0, torch.float32, "cpu")
    batch = ForwardBatch.build([(tokens, SeqSpec(0, len(tokens), [0]))], kv, state, "cpu")
    with torch.inference_mode():
        return model.compute_logits(model(batch))


def test_in_place_rows_keep_their_state_in_the_pool_and_match_a_plain_prefill(model, kernels) -> None:
    got, _, counts = play(model, batched=True, kernels=kernels)
    assert counts == [(n, g, c, 0) for n, g, c in zip(IN_PLACE, GATHERED, CHECKPOINTS, strict=True)]
    full = {name: no_cache(model, tokens) for name, (tokens, _) in SEQS.items()}
    for rnd, rows in enumerate(ROUNDS):
        for row, logits in zip(rows, got[rnd], strict=True):
            want = full[row.seq][row.start : row.start + row.length]
            assert (logits - want).abs().max().item() <= TOL, (rnd, row.seq)
            assert_same_top1(logits, want)


def test_in_place_rows_leave_every_slot_as_the_per_sequence_path_does(model, kernels) -> None:
    _, batched, _ = play(model, batched=True, kernels=kernels)
    _, serial, counts = play(model, batched=False)
    assert not any(n or g for n, g, _, _ in counts)  # the reference took no batched step
    assert batched.rows != list(range(NUM_SLOTS))  # `place` moved slots between pool rows
    for layer in batched.tensors:
        for g, w in zip(batched.logical(layer), serial.logical(layer), strict=True):
            assert (g - w).abs().max().item() <= STEP_TOL, layer


def test_a_move_into_the_block_that_fails_midway_leaves_every_slot_as_it_was(monkeypatch) -> None:
    """`place` swaps pool rows layer by layer; a swap that failed part-way (a GPU out of memory
    for its temporary) left some layers swapped and the slot map not, so a slot another request
    restores later (a checkpoint in the cache) read another's state in those layers. The worker
    call fails and the round is rolled back; the pool must be as before it."""
    layout = {0: ((2, 3),), 1: ((4,), (2, 2))}
    pool = StatePool(layout, 6, torch.float32, "cpu")
    for layer, tensors in pool.tensors.items():
        for j, t in enumerate(tensors):
            t.copy_(torch.arange(t.numel(), dtype=torch.float32).view(t.shape) + 100 * layer + 10 * j)
    before = {layer: pool.logical(layer) for layer in layout}
    selects = []
    select = torch.Tensor.index_select

    def fails_on_the_third(t: torch.Tensor, *args: object) -> torch.Tensor:
        selects.append(t)
        if len(selects) == 3:
            raise torch.OutOfMemoryError("no room for the swap")
        return select(t, *args)

    monkeypatch.setattr(torch.Tensor, "index_select", fails_on_the_third)
    # slots 0 and 5 decode in place, their rows apart: one is moved beside the other
    with pytest.raises(torch.OutOfMemoryError):
        pool.place([(0, 0, 0, (0,)), (1, 1, 5, (5,))], torch.device("cpu"))
    monkeypatch.undo()
    assert len(selects) == 3  # it failed inside the swap
    for layer in layout:
        assert all(torch.equal(a, b) for a, b in zip(pool.logical(layer), before[layer], strict=True))
