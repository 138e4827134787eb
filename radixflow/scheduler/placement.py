"""Checkpoint placement: where a producer saves recurrent state while computing a chunk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from numbers import Integral
from typing import Protocol

from radixflow.plugins import Registry, from_outside
from radixflow.problems import Problem, ProblemError, built, shown


def _no_history() -> int | None:
    return None


def _unshared() -> int:
    return 0


@dataclass(frozen=True)
class PlacementContext:
    prompt_len: int
    start: int  # chunk computes [start, end)
    end: int
    block_size: int
    branch_points: Callable[[int, int], list[int]]  # known divergences in (lo, hi]
    # where this namespace's past requests predict this prompt's siblings will fork (`ForkHistory.
    # predict`): a block boundary, 0 for nowhere useful, None when the namespace has no history
    predicted_fork: Callable[[], int | None] = field(default=_no_history)
    # the deepest block boundary of this prompt other known prompts share (0: none): where they
    # diverge from it, or where one of them ends (a prompt that is a prefix of this one, or the
    # same prompt sent again: `n` choices, a retry)
    shared: Callable[[], int] = field(default=_unshared)


def shared_resume(ctx: PlacementContext) -> int:
    """Where the known prompts sharing the most of this one resume (0: none, or not in a chunk
    from ``ctx.start``): the end of what they share, or, where one is this prompt again, the
    boundary before a block-aligned prompt's end. Pure."""
    tail = _floor(ctx.prompt_len, ctx.block_size)
    shared = ctx.shared() if ctx.start < tail else 0  # a later chunk holds no boundary
    return _floor(ctx.prompt_len - 1, ctx.block_size) if shared >= ctx.prompt_len else shared


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
        return sorted(self._points(ctx, ctx.branch_points(ctx.start, ctx.end)))

    @staticmethod
    def _points(ctx: PlacementContext, branches: list[int]) -> set[int]:
        """The chunk's branch points among ``branches``, the prompt's last block boundary (where
        a longer prompt continuing it resumes) and where the known prompts sharing the most of it
        resume: the end of what they share where one of them ends there (a prefix of this
        prompt: no branch, the path goes on), or, where one is this prompt again, the boundary
        before a block-aligned prompt's end (a prompt resumes at most there: its last token's
        logits are computed)."""
        points = {b for b in branches if ctx.start < b <= ctx.end}
        tail = _floor(ctx.prompt_len, ctx.block_size)
        if ctx.start < tail <= ctx.end:
            points.add(tail)
        resumes = shared_resume(ctx)
        if ctx.start < resumes <= ctx.end:
            points.add(resumes)
        return points


class LonePlacement(BranchPlacement):
    """`branch`, plus a checkpoint at the end of a lone request's shared context.

    A request with no known sibling gets no branch point, so candidates arriving one at a time
    would each recompute their shared context. This placement guesses where that context ends:
    at the fork the namespace's past requests predict, for a request with no known branch point
    at or beyond it; and, in a namespace with no history yet, for a request sharing no block
    with any known sequence, at a ladder of block boundaries 1, 2, 4, 8 and 16 blocks before the
    prompt's last one (a sibling forking ``t`` tokens before the end then reuses at least all
    but about ``2t`` of the prompt). Guesses cost only free or evictable state slots.
    """

    name = "lone"
    LADDER = 5  # rungs of the cold-start ladder

    def positions(self, ctx: PlacementContext) -> list[int]:
        known = ctx.branch_points(0, ctx.prompt_len)
        points = self._points(ctx, known)
        # a known copy or prefix of this prompt is a known sibling, where it resumes a known
        # branch: a guess beside it would take the slots it needs where they are short
        resumes = shared_resume(ctx)
        deepest = max([*known, resumes])
        if deepest >= ctx.end:
            return sorted(points)  # a guess must lie past the deepest known branch: none fits
        for pos in self._guesses(ctx, lone=not known and not resumes):
            if ctx.start < pos <= ctx.end and pos > deepest:
                points.add(pos)
        return sorted(points)

    def _guesses(self, ctx: PlacementContext, lone: bool) -> list[int]:
        predicted = ctx.predicted_fork()
        if predicted is not None:
            return [predicted] if predicted > 0 else []
        if not lone:
            return []
        tail = _floor(ctx.prompt_len, ctx.block_size)
        return [tail - ctx.block_size * 2**k for k in range(self.LADDER)]


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


PLACEMENTS: Registry[type[CheckpointPlacement]] = Registry(
    "checkpoint placement",
    {
        "branch": BranchPlacement,
        "lone": LonePlacement,
        "align": AlignPlacement,
        "none": NoPlacement,
    },
)


def make_placement(name: str) -> CheckpointPlacement:
    """A fresh ``name`` placement; one added from outside the package (docs/extending.md) has its
    answers checked (`CheckedPlacement`), the built-in ones' are the cache's to trust."""
    try:
        entry = PLACEMENTS[name]
    except KeyError:
        raise ValueError(f"unknown checkpoint placement {name!r} (known: {', '.join(PLACEMENTS)})") from None
    made: CheckpointPlacement = built("placement", name, entry, CheckpointPlacement)
    return CheckedPlacement(name, made) if from_outside(type(made)) else made


@dataclass(frozen=True)
class CheckedPlacement:
    """A placement from outside the package whose `positions` are checked to be integers on block
    boundaries in ``(ctx.start, ctx.end]``: one that is not stops the run with one line naming
    it and what it returned (a `ProblemError` on ``placement``), not a traceback from deep in the
    cache, nor a position past the chunk dropped without a word."""

    name: str
    inner: CheckpointPlacement

    def positions(self, ctx: PlacementContext) -> list[int]:
        got = self.inner.positions(ctx)
        why = _outside(got, ctx)
        if why is not None:
            called = f"{self.name!r} ({type(self.inner).__qualname__}) positions"
            raise ProblemError(Problem("placement", f"{called} returned {shown(got)}: {why}"))
        return [int(p) for p in got]  # plain ints: the cache never meets numpy arithmetic


def _outside(got: object, ctx: PlacementContext) -> str | None:
    """Why ``got`` is no answer of `CheckpointPlacement.positions` for ``ctx`` (None: it is). Pure."""
    bs = ctx.block_size

    def misplaced(p: int) -> str | None:
        if p % bs:
            return f"{p} is not a block boundary ({bs} tokens a block)"
        return None if ctx.start < p <= ctx.end else f"{p} is not in the chunk ({ctx.start}, {ctx.end}]"

    return positions_problem(got, misplaced)


def positions_problem(got: object, misplaced: Callable[[int], str | None]) -> str | None:
    """Why ``got``, a plugin's answer, is no list of integer positions, or the first position
    ``misplaced`` names (None: none); 32.0 or True is no position though equal to one. Pure."""
    if not isinstance(got, list | tuple):
        return "not a list of positions"
    for p in got:
        if not isinstance(p, Integral) or isinstance(p, bool):  # numpy's integers are integers
            return f"{shown(p)} is not an integer"
        why = misplaced(p)
        if why is not None:
            return why
    return None
