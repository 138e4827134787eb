"""What the scheduler tells an observer as it decides (the dependency trace listens).

The scheduler holds ``events: SchedulerEvents | None``; None (the default) means nobody listens,
and every emission is behind one ``is None`` test, so an unobserved run pays nothing else. An
observer must not touch the scheduler or the cache: it only records.

A policy that decides something worth seeing (the `adaptive` policy's producer promotions and
recomputes, say) reports it through `Scheduler.note` (or ``events.decision`` directly):

    scheduler.note("promote", producer.id, dependents=len(waiting))
    scheduler.note("recompute", consumer.id, tokens=prefix_len, producer=producer.id)

The trace shows each as an instant on the request's track, in the round being scheduled, with
``details`` as its args.
"""

from __future__ import annotations

from typing import Protocol


class SchedulerEvents(Protocol):
    def parked(self, consumer: str, producer: str) -> None:
        """``consumer`` was found blocked on ``producer``'s PENDING checkpoint in the round being
        scheduled; it waits (parked) until that round ends."""
        ...

    def woken(self, consumer: str, producer: str) -> None:
        """``producer``'s round ended (its checkpoints committed, or withdrawn by a rollback):
        ``consumer`` is matched again from the next round on."""
        ...

    def decision(self, kind: str, request_id: str, **details: object) -> None:
        """A policy's decision about ``request_id`` in the round being scheduled, named by ``kind``
        (e.g. "promote", "recompute"); ``details`` are JSON values (numbers, strings, lists)."""
        ...
