"""Free-list allocator for fixed-size resources (KV blocks, state slots)."""

from __future__ import annotations


class OutOfCapacity(Exception):
    pass


class IdPool:
    """Hands out integer ids ``0..capacity-1``, deterministically: the ids given back first, most
    recently given back first, then ids never handed out, lowest first."""

    def __init__(self, capacity: int, name: str) -> None:
        if capacity < 0:
            raise ValueError(f"{name} capacity must be >= 0")
        self.capacity = capacity
        self.name = name
        # ids below ``_fresh`` have been handed out at least once; those given back wait on
        # ``_free`` (a stack, most recently freed on top) and go before fresh ones. Fresh ids are
        # never listed, so a large cap costs nothing until it is used (a byte budget sizes the caps
        # to what it could ever hold). The order is that of a stack holding every id, lowest on top.
        self._fresh = 0
        self._free: list[int] = []
        self._used: set[int] = set()

    @property
    def free(self) -> int:
        return len(self._free) + self.capacity - self._fresh

    def take(self, n: int) -> list[int]:
        """Allocate ``n`` ids; raises `OutOfCapacity` and allocates nothing if short."""
        if n > self.free:
            raise OutOfCapacity(f"{self.name}: need {n}, have {self.free}")
        if n == 0:
            return []
        reused = min(n, len(self._free))
        ids = self._free[len(self._free) - reused :]
        del self._free[len(self._free) - reused :]
        ids.reverse()  # the stack's top first
        ids.extend(range(self._fresh, self._fresh + n - reused))
        self._fresh += n - reused
        self._used.update(ids)
        return ids

    def give(self, ids: list[int]) -> None:
        if not self._used.issuperset(ids) or len(set(ids)) != len(ids):
            bad = next(i for i in ids if i not in self._used or ids.count(i) > 1)
            raise ValueError(f"{self.name}: id {bad} freed twice or never allocated")
        self._used.difference_update(ids)
        self._free.extend(ids)

    def taken(self, i: int) -> bool:
        """Whether id ``i`` is handed out now. Pure, O(1)."""
        return i in self._used

    def used(self) -> set[int]:
        return set(self._used)
