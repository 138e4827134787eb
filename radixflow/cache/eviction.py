"""Eviction policies: which unlocked, READY cache entry goes first when capacity runs out."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class EvictionCandidate(NamedTuple):  # a tuple: built on every eviction-queue operation
    last_used: int  # logical clock of the last match/extend that touched the entry
    tokens: int  # tokens the entry covers (KV) or its position (checkpoint)


class EvictionPolicy(Protocol):
    name: str

    def priority(self, entry: EvictionCandidate) -> tuple[int, ...]:
        """Sort key; the smallest key is evicted first. Pure: mutates nothing."""
        ...


class LRU:
    name = "lru"

    def priority(self, entry: EvictionCandidate) -> tuple[int, ...]:
        return (entry.last_used,)


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {"lru": LRU}


def make_eviction_policy(name: str) -> EvictionPolicy:
    try:
        return EVICTION_POLICIES[name]()
    except KeyError:
        raise ValueError(
            f"unknown eviction policy {name!r} (known: {', '.join(EVICTION_POLICIES)})"
        ) from None
