"""The router's own memory of what it sent where: prompt-prefix chain hashes -> replicas.

Bounded (least recently routed prefixes go first), so a long-running router does not grow.
Forgetting a replica is O(1): its records carry the replica's epoch, and forgetting starts a new
one, so the old records stop counting where they lie (a scan of a full memory, 2^20 prefixes, held
the router for about a quarter of a second per replaced replica).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import count

DEFAULT_CAPACITY = 1 << 20  # chain hashes (about 16 M tokens of prefixes at 16-token blocks)


class PrefixMemory:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        # chain hash -> {replica: (the epoch it was recorded in, prompts sent there with it in that
        # epoch)}; a record counts only while the replica is still in that epoch. The count lets
        # a refused prompt be retracted without taking its siblings' sends with it
        self._where: OrderedDict[int, dict[str, tuple[int, int]]] = OrderedDict()
        self._epochs = count(1)  # one sequence for every replica: a name seen again starts afresh
        self._epoch: dict[str, int] = {}  # replica -> its current epoch (absent: 0)

    def record(self, chain: Sequence[int], replica: str) -> None:
        """Remember that a prompt with these chain hashes went to ``replica`` (mutates the memory)."""
        epoch = self._epoch.get(replica, 0)
        for h in chain:
            replicas = self._where.pop(h, None) or {}
            was, sent = replicas.get(replica, (epoch, 0))
            replicas[replica] = (epoch, sent + 1 if was == epoch else 1)
            self._where[h] = replicas
        while len(self._where) > self.capacity:
            self._where.popitem(last=False)

    def retract(self, chain: Sequence[int], replica: str) -> None:
        """A prompt recorded with these chain hashes never reached ``replica`` (it refused it):
        one send fewer there; what other prompts sent there still counts (mutates the memory)."""
        epoch = self._epoch.get(replica, 0)
        for h in chain:
            replicas = self._where.get(h, {})
            was, sent = replicas.get(replica, (None, 0))
            if was != epoch:  # nothing there, or only what counts no more (forgotten)
                continue
            if sent > 1:
                replicas[replica] = (epoch, sent - 1)
                continue
            del replicas[replica]
            if not replicas:
                del self._where[h]

    def depths(self, chain: Sequence[int], block_size: int) -> dict[str, int]:
        """Per replica, tokens of the deepest prefix of ``chain`` sent there (absent: none). Pure."""
        found: dict[str, int] = {}
        for i in range(len(chain) - 1, -1, -1):
            for replica, (epoch, _) in self._where.get(chain[i], {}).items():
                if epoch == self._epoch.get(replica, 0):
                    found.setdefault(replica, (i + 1) * block_size)
        return found

    def forget(self, replica: str) -> None:
        """``replica`` is gone: what was sent there stops counting (mutates the memory; O(1))."""
        self._epoch[replica] = next(self._epochs)

    def __len__(self) -> int:
        return len(self._where)
