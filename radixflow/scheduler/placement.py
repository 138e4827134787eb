"""Checkpoint placement: where a producer saves recurrent state while computing a chunk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PlacementContext:
    prompt_len: int
    start: int  # chunk computes [start, end)
    end: int
    block_size: int
    branch_points: Callable[[int, int], list[int]]  # known divergences in (lo, hi]


class CheckpointPlacement(Protocol):
    name: str

    def positions(self, ctx: PlacementContext) -> list[int]:
        """Block-aligned positions in ``(start, end]`` to checkpoint. Pure: mutates nothing."""
        ...


def _floor(pos: int, block: int) -> int:
    return pos // block * block


class BranchPlacement:
    """Marconi-style: where this prompt diverges from other known sequences, plus its end."""

    name = "branch"

    def positions(self, ctx: PlacementContext) -> list[int]:
        points = set(ctx.branch_points(ctx.start, ctx.end))
        tail = _floor(ctx.prompt_len, ctx.block_size)
        if ctx.start < tail <= ctx.end:
            points.add(tail)
        return sorted(points)


class AlignPlacement:
    """vLLM V1 ``align`` mode: the last block boundary of every scheduled chunk."""

    name = "align"

    def positions(self, ctx: PlacementContext) -> list[int]:
        pos = _floor(ctx.end, ctx.block_size)
        return [pos] if pos > ctx.start else []


class NoPlacement:
    """For models without recurrent layers: nothing to checkpoint."""

    name = "none"

    def positions(self, ctx: PlacementContext) -> list[int]:
        return []


PLACEMENTS: dict[str, type[CheckpointPlacement]] = {
    "branch": BranchPlacement,
    "align": AlignPlacement,
    "none": NoPlacement,
}


def make_placement(name: str) -> CheckpointPlacement:
    try:
        return PLACEMENTS[name]()
    except KeyError:
        raise ValueError(f"unknown checkpoint placement {name!r} (known: {', '.join(PLACEMENTS)})") from None
