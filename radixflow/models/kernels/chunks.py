"""Segments of several sequences laid out as equal-size chunks, for one batched kernel call.

The chunked recurrent kernels (the gated delta rule, Mamba2's SSD) do most of their work inside
fixed-size chunks, independently per chunk; only a small state is carried from one chunk to the
next. So the chunks of *every* prefill sequence of a round can share one set of batched tensor
ops, and the carry runs as one loop over chunk index with the sequences' states side by side.

A `ChunkPlan` cuts each sequence's segments into chunks (each segment zero-padded up to a
multiple of the chunk size, so a segment ends on a chunk boundary and its state can be saved
there; zero inputs are inert in both kernels) and orders the chunks *step-major*: all first
chunks, then all second chunks, ..., with sequences sorted by chunk count (most first), so the
sequences still running at step ``j`` are a prefix and their chunks one contiguous slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ChunkSave:
    """After step ``step``, the state of sequence ``seq`` (in plan order) is saved under ``key``."""

    step: int
    seq: int
    key: int


@dataclass(frozen=True)
class ChunkPlan:
    """Where each chunk position reads its token row, and how the chunk steps run."""

    size: int  # tokens per chunk
    rows: torch.Tensor  # [chunks * size] long: token row of each chunk position (pad: `pad_row`)
    pad_row: int  # the row index meaning "zero input" (one past the last real row)
    positions: torch.Tensor  # [pad_row] long: the chunk position of each token row (one each)
    steps: tuple[int, ...]  # sequences with a chunk at step j (non-increasing)
    order: tuple[int, ...]  # plan order -> the caller's sequence index
    saves: tuple[ChunkSave, ...]

    @property
    def chunks(self) -> int:
        return len(self.rows) // self.size

    def step_slices(self) -> list[slice]:
        """The contiguous chunk range of each step."""
        out, lo = [], 0
        for active in self.steps:
            out.append(slice(lo, lo + active))
            lo += active
        return out

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """``x [rows, *d]`` -> ``[chunks, size, *d]`` (padding positions hold zeros)."""
        out = x.new_zeros(len(self.rows), *x.shape[1:])
        out.index_copy_(0, self.positions, x)  # one position per row: deterministic
        return out.view(self.chunks, self.size, *x.shape[1:])

    def scatter(self, y: torch.Tensor, rows: int) -> torch.Tensor:
        """``y [chunks, size, *d]`` -> ``[rows, *d]``: each token row read back from its position."""
        return y.reshape(-1, *y.shape[2:]).index_select(0, self.positions[:rows])

    @classmethod
    def build(
        cls, seqs: list[list[tuple[int, int, int | None]]], rows: int, chunk: int, device: torch.device
    ) -> ChunkPlan:
        """Segments ``(lo, hi, save key or None)`` of each sequence (token rows ``lo..hi-1``, in
        order, consecutive within a sequence) over ``rows`` token rows in all."""
        longest = max(hi - lo for segs in seqs for lo, hi, _ in segs)
        size = min(chunk, longest)
        pieces: list[list[tuple[int, int]]] = []
        ends: list[list[tuple[int, int]]] = []  # (last chunk index, key) per saving segment
        for segs in seqs:
            mine: list[tuple[int, int]] = []
            marks: list[tuple[int, int]] = []
            for lo, hi, key in segs:
                mine.extend((c, min(c + size, hi)) for c in range(lo, hi, size))
                if key is not None:
                    marks.append((len(mine) - 1, key))
            pieces.append(mine)
            ends.append(marks)
        order = sorted(range(len(seqs)), key=lambda b: -len(pieces[b]))
        steps = tuple(sum(1 for b in order if len(pieces[b]) > j) for j in range(len(pieces[order[0]])))
        index: list[int] = []
        for j, active in enumerate(steps):
            for b in order[:active]:
                lo, hi = pieces[b][j]
                index.extend(range(lo, hi))
                index.extend([rows] * (size - (hi - lo)))
        saves = tuple(ChunkSave(step, p, key) for p, b in enumerate(order) for step, key in ends[b])
        where = torch.tensor(index, dtype=torch.long, device=device)
        real = (where < rows).nonzero().squeeze(1)
        if len(real) != rows:  # every row read exactly once, or `scatter` would return garbage
            raise ValueError(f"the segments cover {len(real)} token rows, not the {rows} given")
        positions = torch.empty(rows, dtype=torch.long, device=device)
        positions[where[real]] = real
        return cls(
            size=size,
            rows=where,
            pad_row=rows,
            positions=positions,
            steps=steps,
            order=tuple(order),
            saves=tuple(sorted(saves, key=lambda s: s.step)),
        )
