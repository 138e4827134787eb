"""Free-list allocator for fixed-size resources (KV blocks, state slots)."""

from __future__ import annotations


class OutOfCapacity(Exception):
    pass


class IdPool:
    """Hands out integer ids ``0..capacity-1``; lowest free id first (deterministic)."""

    def __init__(self, capacity: int, name: str) -> None:
        if capacity < 0:
            raise ValueError(f"{name} capacity must be >= 0")
        self.capacity = capacity
        self.name = name
        self._free = list(range(capacity - 1, -1, -1))  # stack, pops the lowest id
        self._used: set[int] = set()

    @property
    def free(self) -> int:
        return len(self._free)

    def take(self, n: int) -> list[int]:
        """Allocate ``n`` ids; raises `OutOfCapacity` and allocates nothing if short."""
        if n > len(self._free):
            raise OutOfCapacity(f"{self.name}: need {n}, have {len(self._free)}")
        if n == 0:
            return []
        ids = self._free[-n:]
        del self._free[-n:]
        ids.reverse()  # the stack's top is the lowest id
        self._used.update(ids)
        return ids

    def give(self, ids: list[int]) -> None:
        if not self._used.issuperset(ids) or len(set(ids)) != len(ids):
            bad = next(i for i in ids if i not in self._used or ids.count(i) > 1)
            raise ValueError(f"{self.name}: id {bad} freed twice or never allocated")
        self._used.difference_update(ids)
        self._free.extend(ids)

    def used(self) -> set[int]:
        return set(self._used)
