"""Scheduling policies behind one protocol (`scan.SchedulingPolicy`) and their registry."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from numbers import Integral

from radixflow.cache.types import Match
from radixflow.plugins import Registry, from_outside
from radixflow.problems import Problem, ProblemError, built, shown
from radixflow.scheduler.adaptive.adaptive_policy import Adaptive
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.queue import WaitingQueue
from radixflow.scheduler.request import Request
from radixflow.scheduler.scan import PolicyContext, ScanAction, SchedulingPolicy

__all__ = ["SCHEDULING_POLICIES", "ScanAction", "SchedulingPolicy", "default_placement", "make_policy"]


class FCFS:
    """Arrival order (the queue is kept in arrival order already); takes every ready request and
    keeps no state between rounds."""

    placement = "branch"  # the paper's: where known sequences diverge, plus each prompt's end

    def bind(self, context: PolicyContext) -> None:
        pass

    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        return waiting

    def on_ready(
        self, request: Request, match: Match, reuse: int, draft: SchedulerOutput
    ) -> ScanAction | None:
        return None

    def on_scheduled(self, request: Request) -> None:
        pass

    def on_arrival(self, request: Request) -> None:
        pass

    def on_left(self, request: Request) -> None:
        pass

    def on_round_end(self, woken: Sequence[Request], now: float | None) -> None:
        pass

    def counters(self) -> dict[str, int]:
        return {}


class Native(FCFS):
    """vLLM V1-like: a blocked consumer looks like an allocation failure and ends the scan."""

    name = "native"

    def on_blocked(self, request: Request, match: Match, draft: SchedulerOutput) -> ScanAction:
        return ScanAction.STOP


class RadixFlow(FCFS):
    """Separate matching from readiness: the blocked consumer waits locally, the scan goes on."""

    name = "radixflow"

    def on_blocked(self, request: Request, match: Match, draft: SchedulerOutput) -> ScanAction:
        return ScanAction.SKIP


SCHEDULING_POLICIES: Registry[type[SchedulingPolicy]] = Registry(
    "scheduling policy",
    {
        "native": Native,
        "radixflow": RadixFlow,
        "adaptive": Adaptive,
    },
)


def _registered(name: str) -> type[SchedulingPolicy]:
    try:
        return SCHEDULING_POLICIES[name]
    except KeyError:
        known = ", ".join(SCHEDULING_POLICIES)
        raise ValueError(f"unknown scheduling policy {name!r} (known: {known})") from None


def make_policy(name: str) -> SchedulingPolicy:
    """A fresh ``name`` policy; an entry that cannot serve (docs/extending.md) is a `ProblemError`."""
    made: SchedulingPolicy = built("policy", name, _registered(name), SchedulingPolicy)
    _own_placement(name, made)
    return made


def default_placement(policy: str) -> str:
    """The checkpoint placement ``policy`` is built around (raises ValueError for an unknown name,
    `ProblemError` for an entry naming none, or one not registered)."""
    return _own_placement(policy, _registered(policy))


def _own_placement(name: str, policy: object) -> str:
    """The registered placement ``policy`` (the entry ``name``, or what it built) names."""
    placement = getattr(policy, "placement", None)
    called = f"{name!r} ({getattr(policy, '__qualname__', type(policy).__qualname__)})"
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        known = ", ".join(PLACEMENTS)
        said = "names no placement" if placement is None else f"names placement {placement!r}, not registered"
        raise ProblemError(Problem("policy", f"{called} {said} (its `placement`: one of {known})"))
    return placement


def scan_order(policy: SchedulingPolicy, waiting: WaitingQueue) -> Iterator[Request]:
    """``policy``'s scan order of ``waiting`` (`SchedulingPolicy.order`). A policy from outside
    the package (docs/extending.md) has each request checked as the scan takes it: one given that
    is not waiting, given twice, or one left out stops the run with one line naming the policy,
    not a traceback from the queue nor the engine's `scheduler bug` at an empty round."""
    got = policy.order(waiting)
    return _checked_order(policy, waiting, got) if from_outside(type(policy)) else iter(got)


def _checked_order(policy: SchedulingPolicy, waiting: WaitingQueue, got: object) -> Iterator[Request]:
    def refused(why: str) -> ProblemError:
        called = f"{policy.name!r} ({type(policy).__qualname__}) order"
        return ProblemError(Problem("policy", f"{called} {why}"))

    if not isinstance(got, Iterable):
        raise refused(f"returned {shown(got)}: not an iterable of the waiting requests")
    seen: set[str] = set()
    for request in got:
        if isinstance(request, Request) and request.id in seen:
            raise refused(f"gave {request.id!r} twice")
        if not isinstance(request, Request) or request not in waiting:
            raise refused(f"gave {shown(getattr(request, 'id', request))}, not a waiting request")
        seen.add(request.id)
        yield request
    # the whole scan ran: one never given waits forever (the scan that admitted the others over)
    left = next((r for r in waiting if r.id not in seen), None)
    if left is not None:
        raise refused(f"left out {left.id!r}, which is waiting: it gives each waiting request once")


def policy_counters(policy: SchedulingPolicy) -> dict[str, int]:
    """``policy``'s decision counts (`SchedulingPolicy.counters`); a policy from outside the
    package (docs/extending.md) answering no dict of integer counts by name is a `ProblemError`
    naming it, not a results.json holding what it gave (or json's traceback at a NaN)."""
    got = policy.counters()
    if not from_outside(type(policy)):
        return got
    why = _no_counts(got)
    if why is not None:
        called = f"{policy.name!r} ({type(policy).__qualname__}) counters returned {shown(got)}"
        raise ProblemError(Problem("policy", f"{called}: {why}"))
    return {name: int(count) for name, count in got.items()}  # plain ints: json writes them


def _no_counts(got: object) -> str | None:
    """Why ``got`` is no answer of `SchedulingPolicy.counters` (None: it is). Pure."""
    if not isinstance(got, dict):
        return "not a dict of counts by name"
    for name, count in got.items():
        if not isinstance(name, str):
            return f"{shown(name)} is not a name"
        if not isinstance(count, Integral) or isinstance(count, bool):  # numpy's are integers
            return f"the count of {name!r} is {shown(count)}, not an integer"
    return None
