"""Eviction policies: which unlocked, READY cache entry goes first when capacity runs out."""

from __future__ import annotations

from typing import Protocol


class EvictionPolicy(Protocol):
    name: str

    def priority(self, last_used: int, tokens: int) -> tuple[int, ...]:
        """Sort key of an entry; the smallest is evicted first. Pure: mutates nothing.

        ``last_used``: logical clock of the last match/extend that touched the entry; ``tokens``:
        the position its KV or checkpoint ends at. Keys may only grow as ``last_used`` does.
        """
        ...


class LRU:
    name = "lru"

    def priority(self, last_used: int, tokens: int) -> tuple[int, ...]:
        return (last_used,)


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {"lru": LRU}


def make_eviction_policy(name: str) -> EvictionPolicy:
    try:
        return EVICTION_POLICIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {name!r} (known: {', '.join(EVICTION_POLICIES)})"
        ) from None
