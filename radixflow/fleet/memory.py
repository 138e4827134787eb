"""The router's own memory of what it sent where: prompt-prefix chain hashes -> replicas.

Bounded (least recently routed prefixes go first), so a long-running router does not grow.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

DEFAULT_CAPACITY = 1 << 20  # chain hashes (about 16 M tokens of prefixes at 16-token blocks)


class PrefixMemory:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._where: OrderedDict[int, set[str]] = OrderedDict()

    def record(self, chain: Sequence[int], replica: str) -> None:
        """Remember that a prompt with these chain hashes went to ``replica`` (mutates the memory)."""
        for h in chain:
            replicas = self._where.pop(h, None) or set()
            replicas.add(replica)
            self._where[h] = replicas
        while len(self._where) > self.capacity:
            self._where.popitem(last=False)

    def depths(self, chain: Sequence[int], block_size: int) -> dict[str, int]:
        """Per replica, tokens of the deepest prefix of ``chain`` sent there (absent: none). Pure."""
        found: dict[str, int] = {}
        for i in range(len(chain) - 1, -1, -1):
            for replica in self._where.get(chain[i], ()):
                found.setdefault(replica, (i + 1) * block_size)
        return found

    def forget(self, replica: str) -> None:
        """``replica`` is gone (mutates the memory)."""
        for h in list(self._where):
            self._where[h].discard(replica)
            if not self._where[h]:
                del self._where[h]

    def __len__(self) -> int:
        return len(self._where)
