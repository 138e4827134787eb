"""Scheduling policies: what the waiting-queue scan does at a blocked consumer."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Protocol

from radixflow.cache.types import Match
from radixflow.scheduler.request import Request


class ScanAction(Enum):
    STOP = "stop"  # end this round's scan
    SKIP = "skip"  # leave the request waiting (local wait) and keep scanning


class SchedulingPolicy(Protocol):
    name: str

    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        """Scan order of the waiting queue (arrival order) for this round. Pure: mutates nothing.

        The scan removes admitted requests from the queue while it iterates the result.
        """
        ...

    def on_blocked(self, request: Request, match: Match) -> ScanAction:
        """Decide the scan's fate at a consumer whose best reuse point is PENDING. Pure."""
        ...


class FCFS:
    """Arrival order (the queue is kept in arrival order already)."""

    def order(self, waiting: Iterable[Request]) -> Iterable[Request]:
        return waiting


class Native(FCFS):
    """vLLM V1-like: a blocked consumer looks like an allocation failure and ends the scan."""

    name = "native"

    def on_blocked(self, request: Request, match: Match) -> ScanAction:
        return ScanAction.STOP


class RadixFlow(FCFS):
    """Separate matching from readiness: the blocked consumer waits locally, the scan goes on."""

    name = "radixflow"

    def on_blocked(self, request: Request, match: Match) -> ScanAction:
        return ScanAction.SKIP


SCHEDULING_POLICIES: dict[str, type[SchedulingPolicy]] = {"native": Native, "radixflow": RadixFlow}


def make_policy(name: str) -> SchedulingPolicy:
    try:
        return SCHEDULING_POLICIES[name]()
    except KeyError:
        known = ", ".join(SCHEDULING_POLICIES)
        raise ValueError(f"unknown scheduling policy {name!r} (known: {known})") from None
