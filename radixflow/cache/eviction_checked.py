"""Eviction policies as the cache takes them: built by name (`make_eviction_policy`), one from
outside the package checked (`CheckedEviction`: keys and clock must be numbers a heap can order,
the clock never running back; docs/extending.md), and what a queue does with a key that dropped
(`lowered_key`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real

from radixflow.cache.eviction import EVICTION_POLICIES, EntryKind, EntrySizes, EvictionPolicy, Priority
from radixflow.cache.node import Node
from radixflow.plugins import from_outside
from radixflow.problems import Problem, ProblemError, built, shown


def lowered_key(policy: EvictionPolicy, kind: EntryKind) -> Callable[[Node, Priority, Priority], None] | None:
    """What the queue of ``kind`` calls on an entry met above its node's priority (a pop may have
    passed over the true victim): a key that dropped with no requeue; None for a built-in coupled one."""
    called = f"{policy.name!r} ({type(getattr(policy, 'inner', policy)).__qualname__})"  # checked or not
    how = "but where the cache requeues them" if policy.coupled else "(coupled = True: the cache requeues)"
    how = f"keys only grow {how}"

    def refuse(node: Node, key: Priority, current: Priority) -> None:
        said = f"{called} priority of node {node.id}'s {kind.value} entry dropped from {shown(key)}"
        raise ProblemError(Problem("eviction", f"{said} to {shown(current)} while queued: {how}"))

    return None if policy.coupled and not isinstance(policy, CheckedEviction) else refuse


def make_eviction_policy(name: str, sizes: EntrySizes | None = None) -> EvictionPolicy:
    """A fresh policy (its clock at zero) over entries of ``sizes`` (None: every byte alike)."""
    try:
        factory = EVICTION_POLICIES[name]
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {name!r} (known: {', '.join(EVICTION_POLICIES)})"
        ) from None
    made: EvictionPolicy = built("eviction", name, factory, EvictionPolicy, (sizes,), takes="factory(sizes)")
    return CheckedEviction(name, made) if from_outside(type(made)) else made


class CheckedEviction:
    """An eviction policy from outside the package (docs/extending.md) whose keys and clock are
    checked: a key that is no tuple of numbers (None, NaN: keys a heap cannot order) or a clock
    that is no number or runs back stops the run with one line naming it and what it answered
    (a `ProblemError` on ``eviction``), not a traceback from the cache's heap nor a run ranking
    by keys that mean nothing."""

    def __init__(self, name: str, inner: EvictionPolicy) -> None:
        self.name = name
        self.inner = inner
        self._clock = -math.inf  # the latest clock read: it never decreases

    @property
    def coupled(self) -> bool:
        return self.inner.coupled

    @property
    def clock(self) -> float:
        got = self.inner.clock
        why = _no_number(got)
        if why is None and got < self._clock:  # a node stamped with it would rank below older ones
            why = f"below {shown(self._clock)}, which it was before (a clock never runs back)"
        if why is not None:
            raise ProblemError(Problem("eviction", f"{self._called} clock is {shown(got)}: {why}"))
        self._clock = got
        return got

    def priority(self, node: Node, kind: EntryKind) -> Priority:
        got = self.inner.priority(node, kind)
        why = "not a tuple of numbers" if not isinstance(got, tuple) else None
        why = why or next((f"{shown(v)} is {w}" for v in got if (w := _no_number(v))), None)
        if why is not None:
            raise ProblemError(Problem("eviction", f"{self._called} priority returned {shown(got)}: {why}"))
        return got

    def evicted(self, node: Node, kind: EntryKind) -> None:
        self.inner.evicted(node, kind)

    def computed(self, node: Node, tokens: int) -> None:
        self.inner.computed(node, tokens)

    @property
    def _called(self) -> str:
        return f"{self.name!r} ({type(self.inner).__qualname__})"


def _no_number(value: object) -> str | None:
    """Why ``value`` cannot rank an entry (None: it can); NaN is neither below nor above any. Pure."""
    return "not a number" if not isinstance(value, Real) or math.isnan(value) else None
