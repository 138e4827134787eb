"""Batch shapes to time: a grid to fit on and a disjoint set of shapes held out to check the fit.

The held-out batches use chunk lengths that never occur in the fit set, after no cached prefix or
one of a length the fit set never has, mixed within one batch, so the reported error is that of
predicting rounds the fit has not seen.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from radixflow.costmodel.shape.chunk import ChunkShape

FIT_SEQUENCES = (1, 2, 4, 8)
# up to a prompt of half the default round budget: a lone long prompt computed from scratch is a
# common round (a context with its first candidate), and priced from chunks of at most 256 tokens
# its causal attention was an extrapolation (docs/cost-model.md, "Quiet and noisy hours")
FIT_LENGTHS = (16, 64, 256, 1024)
FIT_STARTS = (0, 1024)
HELD_OUT_LENGTHS = (24, 48, 96, 160, 384, 768)
HELD_OUT_STARTS = (256, 640, 1536)


@dataclass(frozen=True)
class DesignBatch:
    split: str  # "fit" or "held_out"
    chunks: tuple[ChunkShape, ...]

    @property
    def tokens(self) -> int:
        return sum(c.length for c in self.chunks)


def _chunk(start: int, length: int, sample: bool, block_size: int, hybrid: bool) -> ChunkShape:
    # a producer-like chunk checkpoints its state at its last block boundary, as `branch` does
    aligned = (start + length) // block_size * block_size
    snapshots = int(hybrid and aligned > start)
    return ChunkShape(start, length, sample, restores=hybrid and start > 0, snapshots=snapshots)


def fit_design(
    max_tokens: int, block_size: int, hybrid: bool, context: int | None = None
) -> list[DesignBatch]:
    """Uniform batches over the grid (sequences x length x cached prefix) within ``max_tokens``,
    each chunk within the model's ``context`` (None: any)."""
    out = []
    for n, length, start in itertools.product(FIT_SEQUENCES, FIT_LENGTHS, FIT_STARTS):
        if n * length > max_tokens or not _within(start + length, context):
            continue
        # the last chunk of a round is often mid-prompt (no logits): vary it
        chunks = tuple(_chunk(start, length, i < n - 1 or n == 1, block_size, hybrid) for i in range(n))
        out.append(DesignBatch("fit", chunks))
    return out


def _within(end: int, context: int | None) -> bool:
    return context is None or end <= context


def held_out_design(
    count: int, max_tokens: int, block_size: int, hybrid: bool, seed: int = 1, context: int | None = None
) -> list[DesignBatch]:
    """Random mixed batches from lengths and prefixes absent from the fit grid, each chunk within
    the model's ``context`` (None: any; a batch reaching past it is drawn again, so a model with
    room for every shape gets the batches it always did). ValueError where no chunk fits in the
    context or in ``max_tokens`` (no draw would ever fit: the loop below would never end)."""
    shortest = min(HELD_OUT_LENGTHS)
    for what, room in (("context", context), ("round budget", max_tokens)):
        if not _within(shortest, room):
            raise ValueError(
                f"a {what} of {room} tokens holds no held-out round: the shortest held-out chunk is "
                f"{shortest} tokens"
            )
    rng = random.Random(seed)
    out: list[DesignBatch] = []
    while len(out) < count:
        n = rng.choice((1, 2, 3, 5, 6))
        # the first chunk always samples, so every round ends in a device sync on CUDA
        chunks = tuple(
            _chunk(
                rng.choice((0, *HELD_OUT_STARTS)),
                rng.choice(HELD_OUT_LENGTHS),
                i == 0 or rng.random() < 0.7,
                block_size,
                hybrid,
            )
            for i in range(n)
        )
        if sum(c.length for c in chunks) <= max_tokens and all(_within(c.end, context) for c in chunks):
            out.append(DesignBatch("held_out", chunks))
    return out
