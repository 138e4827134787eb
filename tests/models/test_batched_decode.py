"""The batched decode step of every family against the per-sequence path and a plain prefill.

One scripted workload per family runs twice on identical pools: with the one-token rows of each
round in one batched step per layer (``batched_decode=True``) and with every row on its own
chunked path (the reference). Every round's logits and the final state pool must agree within
`STEP_TOL`, and every decode row's logits must match a no-cache prefill of its whole sequence.

The rounds hit the edges of the gather/scatter: a fresh one-token prompt (no state to restore),
fresh and restored rows together, two rows restoring one checkpoint, a row saving into two
slots and one saving into none, a sequence finishing while others go on, mixed prefill and
decode in one round (decode rows first, and once after a prefill chunk), a batch of one, a
state pool with no spare slot (the last slot is used), and the in-place update: rows that save
into the slot they restore update it where it lies (`StatePool.place` moves those states into
one block of pool rows first, so the slots move between rows from round to round), next to rows
gathered in the same round, and a round where every in-place row also saves into a second slot.
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

# Batched step vs per-sequence path: the same math in another order. The kernels agree to a few
# ulps; through the layers that grows to at most 5.2e-5 on logits of magnitude up to ~20 (where
# a float32 ulp is 1.9e-6; the reference's one-token rows share a chunked call padded to the
# round's longest chunk, and the delta-rule step reads its output from the old state), so this
# bound is ~40 ulps, under the 1e-4 held against a plain prefill below (and against transformers
# elsewhere). A wrong state or slot is off by O(1).
STEP_TOL = 8e-5

# Sequences: name -> (tokens, block table). E and F fork from A's checkpoints; they share A's
# first block and get a copy of its second (made before their first round, see COPIES).
A = prompt(1, 28)
SEQS = {
    "A": (A, [0, 1]),
    "B": (prompt(2, 22), [2, 3]),
    "C": (prompt(3, 4), [4]),
    "D": (prompt(4, 20), [5, 6]),
    "E": (A[:24] + prompt(5, 4), [0, 7]),
    "F": (A[:25] + prompt(6, 3), [0, 8]),
    "G": (prompt(7, 3), [9]),
}
NUM_BLOCKS, NUM_SLOTS = 10, 8  # every slot is used (slot 7 is the last one)


@dataclass(frozen=True)
class Row:
    seq: str
    start: int
    length: int
    restore: int | None
    saves: tuple[tuple[int, int], ...] = ()  # (position, slot)


ROUNDS: list[list[Row]] = [
    # prefill A (checkpoint at 24 into slot 2, working slot 0) and B; C is a fresh one-token prompt
    [
        Row("A", 0, 24, None, ((24, 2), (24, 0))),
        Row("B", 0, 20, None, ((20, 1),)),
        Row("C", 0, 1, None, ((1, 3),)),
    ],
    # decode rows first, then a prefill chunk: A saves twice, E restores A's checkpoint, G is fresh
    [
        Row("A", 24, 1, 0, ((25, 0), (25, 5))),
        Row("B", 20, 1, 1, ((21, 1),)),
        Row("C", 1, 1, 3, ((2, 3),)),
        Row("E", 24, 1, 2, ((25, 4),)),
        Row("G", 0, 1, None, ((1, 7),)),
        Row("D", 0, 16, None, ((16, 6),)),
    ],
    # B's last token (saves nothing), then B is gone; F restores the slot A saved last round,
    # E restores the slot it saved; a prefill chunk sits between decode rows
    [
        Row("A", 25, 1, 0, ((26, 0),)),
        Row("B", 21, 1, 1),
        Row("D", 16, 4, 6, ((18, 6), (20, 6))),
        Row("F", 25, 1, 5, ((26, 5),)),
        Row("E", 25, 1, 4, ((26, 4),)),
        Row("C", 2, 1, 3, ((3, 3),)),
        Row("G", 1, 1, 7, ((2, 7),)),
    ],
    [Row("A", 26, 1, 0, ((27, 0),))],  # a batch of one
    [Row("F", 26, 1, 5, ((27, 5),)), Row("E", 26, 1, 4, ((27, 4),)), Row("C", 3, 1, 3)],
    # every row updates its own slot in place and also saves into another (a tail checkpoint)
    [Row("F", 27, 1, 5, ((28, 5), (28, 1))), Row("E", 27, 1, 4, ((28, 4), (28, 6)))],
]
COPIES = {1: [(1, 7)], 2: [(1, 8)]}  # before round i: copy KV block src -> dst (E's and F's fork)


@pytest.fixture(scope="module", params=ZOO_TINY)
def model(request: pytest.FixtureRequest) -> torch.nn.Module:
    family = request.param.removesuffix("-tiny")
    config = preset_config(request.param)
    net = model_class(config["model_type"])(Config(config))
    importlib.import_module(FAMILY_SOURCES[family][0]).init_weights(net, torch.Generator().manual_seed(0))
    return net.eval()


def copy_block(kv: KVPool, src: int, dst: int) -> None:
    for pool in (*kv.k.values(), *kv.v.values()):
        pool[dst * BLOCK : (dst + 1) * BLOCK] = pool[src * BLOCK : (src + 1) * BLOCK]


def play(
    model: torch.nn.Module, batched: bool, kernels: Kernels = TORCH_KERNELS
) -> tuple[list[list[torch.Tensor]], StatePool, list[int]]:
    """Run ROUNDS on fresh pools; per round, each row's logits ``[length, vocab]``."""
    use_kernels(model, kernels)  # the norms too (the model fixture is shared across backends)
    kv = KVPool(model.kv_layout(), NUM_BLOCKS, BLOCK, torch.float32, "cpu")
    state = StatePool(model.state_layout(), NUM_SLOTS, torch.float32, "cpu")
    out, decode_rows = [], []
    for i, rows in enumerate(ROUNDS):
        for src, dst in COPIES.get(i, []):
            copy_block(kv, src, dst)
        chunks = []
        for r in rows:
            tokens, table = SEQS[r.seq]
            snaps = [Snapshot(pos, slot) for pos, slot in r.saves]
            spec = SeqSpec(r.start, r.length, table, r.restore, snaps)
            chunks.append((tokens[r.start : r.start + r.length], spec))
        batch = ForwardBatch.build(chunks, kv, state, "cpu", batched_decode=batched, kernels=kernels)
        decode_rows.append(len(batch.decode))
        with torch.inference_mode():
            logits = model.compute_logits(model(batch))
        offs = batch.offsets
        out.append([logits[offs[j] : offs[j + 1]] for j in range(len(rows))])
    return out, state, decode_rows


def no_cache(model: torch.nn.Module, tokens: list[int]) -> torch.Tensor:
    n = len(tokens)
    use_kernels(model, TORCH_KERNELS)  # the eager reference
    kv = KVPool(model.kv_layout(), -(-n // BLOCK), BLOCK, torch.float32, "cpu")
    state = StatePool(model.state_layout(), 0, torch.float32, "cpu")
    batch = ForwardBatch.build([(tokens, SeqSpec(0, n, list(range(-(-n // BLOCK)))))], kv, state, "cpu")
    with torch.inference_mode():
        return model.compute_logits(model(batch))


def test_batched_decode_matches_the_per_sequence_path(model: torch.nn.Module, kernels: Kernels) -> None:
    batched, batched_state, decode_rows = play(model, batched=True, kernels=kernels)
    serial, serial_state, no_rows = play(model, batched=False)
    assert decode_rows == [1, 5, 6, 1, 3, 2] and not any(no_rows)  # the batched step really ran
    for rnd, (got, want) in enumerate(zip(batched, serial, strict=True)):
        for row, g, w in zip(ROUNDS[rnd], got, want, strict=True):
            assert (g - w).abs().max().item() <= STEP_TOL, (rnd, row.seq)
    for layer in batched_state.tensors:
        for g, w in zip(batched_state.logical(layer), serial_state.logical(layer), strict=True):
            assert (g - w).abs().max().item() <= STEP_TOL, layer


def test_batched_decode_matches_a_plain_prefill(model: torch.nn.Module, kernels: Kernels) -> None:
    batched, _, _ = play(model, batched=True, kernels=kernels)
    full = {name: no_cache(model, tokens) for name, (tokens, _) in SEQS.items()}
    for rnd, rows in enumerate(ROUNDS):
        for row, got in zip(rows, batched[rnd], strict=True):
            want = full[row.seq][row.start : row.start + row.length]
            assert (got - want).abs().max().item() <= TOL, (rnd, row.seq)
            assert_same_top1(got, want)


def test_a_decode_row_overwriting_a_slot_an_earlier_row_restores(model: torch.nn.Module) -> None:
    """Row 0 resumes X from slot 0; row 1, a decode row of Y, saves into slot 0. The earlier row
    reads the state slot 0 held before the round (as on the per-sequence path): the batched step,
    which runs before every other row, once overwrote it first."""
    x, y = prompt(11, 30), prompt(12, 10)

    def rounds(batched: bool) -> list[torch.Tensor]:
        kv = KVPool(model.kv_layout(), 4, BLOCK, torch.float32, "cpu")
        state = StatePool(model.state_layout(), 2, torch.float32, "cpu")
        out = []
        first = [
            (x[:20], SeqSpec(0, 20, [0, 1], None, [Snapshot(20, 0)])),
            (y[:5], SeqSpec(0, 5, [2], None, [Snapshot(5, 1)])),
        ]
        second = [(x[20:], SeqSpec(20, 10, [0, 1], 0)), (y[5:6], SeqSpec(5, 1, [2], 1, [Snapshot(6, 0)]))]
        for chunks in (first, second):
            batch = ForwardBatch.build(chunks, kv, state, "cpu", batched_decode=batched)
            with torch.inference_mode():
                out.append(model.compute_logits(model(batch)))
        return out

    use_kernels(model, TORCH_KERNELS)
    want = torch.cat([no_cache(model, x)[20:], no_cache(model, y)[5:6]])
    for batched in (False, True):
        got = rounds(batched)[1]
        assert (got - want).abs().max().item() <= TOL, batched
