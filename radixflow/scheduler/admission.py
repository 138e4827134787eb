"""Checkpoint admission: which wanted checkpoints may evict a READY one to get a state slot.

Placement says where a chunk would like to save recurrent state; admission decides which of those
saves are worth a checkpoint already cached when state slots are short. A save not admitted still
takes a free slot if one is left: admission changes only what is kept, never an output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from radixflow.plugins import Registry, from_outside
from radixflow.problems import Problem, ProblemError, built, shown
from radixflow.scheduler.placement import positions_problem


@dataclass(frozen=True)
class AdmissionContext:
    """What is known of one request's wanted saves when slots are short."""

    wanted: list[int]  # positions the placement wants, sorted
    # known divergences within the chunk (registered or cached), and where the known prompts
    # sharing the most of this one resume (a prefix of it, a copy: `placement.shared_resume`)
    branch_points: Callable[[], list[int]]
    predicted_fork: Callable[[], int | None]  # where the namespace's past requests forked (`ForkHistory`)
    tail: int  # the request's own last position a save may land on (prompt tail or decode step)
    resumed: int  # prompt tokens it resumed from the cache (> 0: it continues cached content)


class CheckpointAdmission(Protocol):
    name: str

    def may_evict(self, ctx: AdmissionContext) -> list[int]:
        """The positions of ``ctx.wanted`` worth evicting a READY checkpoint for, sorted; the rest
        take only free slots. Pure."""
        ...


class AdmitAll:
    """Every wanted save may evict (what the cache did before admission existed)."""

    name = "all"

    def may_evict(self, ctx: AdmissionContext) -> list[int]:
        return ctx.wanted


class AdmitLikely:
    """Only saves with evidence of reuse may evict: a known branch point (other prompts diverge
    there now, or cached ones did before, or a known prefix or copy of this prompt resumes
    there), the fork the namespace's history predicts (what `lone` learns), or the own tail of a
    request that continued cached content (a conversation's next turn starts there). A one-off
    prompt's tail, the cold-start ladder's guesses and chunk-end saves take only free slots, so
    they never flush checkpoints that serve others."""

    name = "likely"

    def may_evict(self, ctx: AdmissionContext) -> list[int]:
        backed = set(ctx.branch_points())
        fork = ctx.predicted_fork()
        if fork:
            backed.add(fork)
        if ctx.resumed > 0:
            backed.add(ctx.tail)
        return [p for p in ctx.wanted if p in backed]


ADMISSIONS: Registry[type[CheckpointAdmission]] = Registry(
    "checkpoint admission", {"all": AdmitAll, "likely": AdmitLikely}
)


def make_admission(name: str) -> CheckpointAdmission:
    try:
        entry = ADMISSIONS[name]
    except KeyError:
        raise ValueError(f"unknown checkpoint admission {name!r} (known: {', '.join(ADMISSIONS)})") from None
    made: CheckpointAdmission = built("admission", name, entry, CheckpointAdmission)
    return CheckedAdmission(name, made) if from_outside(type(made)) else made


@dataclass(frozen=True)
class CheckedAdmission:
    """An admission from outside the package (docs/extending.md) whose `may_evict` is checked to
    answer positions of ``ctx.wanted``: one that does not stops the run with one line naming it
    and what it returned (a `ProblemError` on ``admission``), not a traceback from the cache."""

    name: str
    inner: CheckpointAdmission

    def may_evict(self, ctx: AdmissionContext) -> list[int]:
        got = self.inner.may_evict(ctx)
        why = _unwanted(got, ctx)
        if why is not None:
            called = f"{self.name!r} ({type(self.inner).__qualname__}) may_evict returned {shown(got)}"
            raise ProblemError(Problem("admission", f"{called}: {why}"))
        return sorted({int(p) for p in got})  # as the protocol says: sorted, each once; plain ints


def _unwanted(got: object, ctx: AdmissionContext) -> str | None:
    """Why ``got`` is no answer of `CheckpointAdmission.may_evict` for ``ctx`` (None: it is): the
    integers a placement answers, each one of ``ctx.wanted``. Pure."""

    def unwanted(p: int) -> str | None:
        return None if p in ctx.wanted else f"{shown(p)} is not one of the wanted {shown(ctx.wanted)}"

    return positions_problem(got, unwanted)
