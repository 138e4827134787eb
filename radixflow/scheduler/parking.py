"""Blocked consumers parked on the producer whose PENDING checkpoint they wait for."""

from __future__ import annotations

from radixflow.scheduler.request import Request


class ParkingLot:
    """Consumers found blocked during a round's scan, by producer.

    A parked consumer is not matched again: the bubble count passes over it, and it wakes when
    its producer's checkpoints commit (`update`) or are withdrawn (`rollback`). PENDING state only
    lives until the end of the round that computes it, so the lot is empty between rounds.
    """

    def __init__(self) -> None:
        self._by_producer: dict[str, list[Request]] = {}
        self._parked: set[str] = set()  # request ids

    def park(self, consumer: Request, producer: str) -> None:
        self._by_producer.setdefault(producer, []).append(consumer)
        self._parked.add(consumer.id)

    def wake(self, producer: str) -> list[Request]:
        """Release the consumers waiting on ``producer``'s checkpoints (mutates the lot)."""
        woken = self._by_producer.pop(producer, [])
        self._parked.difference_update(r.id for r in woken)
        return woken

    def holds(self, request: Request) -> bool:
        return request.id in self._parked

    def __len__(self) -> int:
        return len(self._parked)
