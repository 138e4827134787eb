"""Where a namespace's requests fork from what was cached before them, learned from admissions.

A request of ``n`` prompt tokens admitted with its first ``f`` tokens already in the cache (KV, on
whatever checkpoint it could restore) forked at ``f``: its *tail* is ``n - f``. Requests of one
workload have tails alike (a candidate after its shared context, a user turn after a system
prompt), so the tails seen so far say where a request alone in the queue, with no known sibling
yet, should leave a checkpoint for the siblings that may follow it. Bounded: the last
``per_namespace`` tails of the ``namespaces`` namespaces seen most recently, each known by a
fixed-size digest of its name (a cache salt may be megabytes long).
"""

from __future__ import annotations

import hashlib
from bisect import insort
from collections import OrderedDict, deque

PER_NAMESPACE = 64
NAMESPACES = 1024


class _Tails:
    """One namespace's recent tails, and how many of each (what `predict` scans, shortest first:
    requests of one workload repeat a few tail lengths, so the scan is short)."""

    def __init__(self, size: int) -> None:
        self.recent: deque[int] = deque(maxlen=size)
        self.count: dict[int, int] = {}
        self.distinct: list[int] = []  # the keys of ``count``, ascending

    def add(self, tail: int) -> None:
        if len(self.recent) == self.recent.maxlen:
            self._drop(self.recent[0])
        self.recent.append(tail)
        if tail not in self.count:
            insort(self.distinct, tail)
        self.count[tail] = self.count.get(tail, 0) + 1

    def _drop(self, tail: int) -> None:
        self.count[tail] -= 1
        if not self.count[tail]:
            del self.count[tail]
            self.distinct.remove(tail)


class ForkHistory:
    def __init__(self, per_namespace: int = PER_NAMESPACE, namespaces: int = NAMESPACES) -> None:
        self.per_namespace = per_namespace
        self.namespaces = namespaces
        self._tails: OrderedDict[bytes, _Tails] = OrderedDict()

    def observe(self, namespace: str, prompt_len: int, fork: int) -> None:
        """Record an admission: ``fork`` prompt tokens of ``prompt_len`` were already cached (0: it
        shared nothing, which counts too: it lowers the share of requests a checkpoint serves).
        Mutates the history; forgets the namespace seen least recently past ``namespaces``."""
        key = _key(namespace)
        tails = self._tails.get(key)
        if tails is None:
            tails = self._tails[key] = _Tails(self.per_namespace)
            if len(self._tails) > self.namespaces:
                self._tails.popitem(last=False)
        else:
            self._tails.move_to_end(key)
        tails.add(prompt_len - fork)

    def predict(self, namespace: str, prompt_len: int, block_size: int) -> int | None:
        """Where a prompt of ``prompt_len`` tokens should checkpoint for the siblings to come: the
        block boundary ``p`` maximising ``p`` × (past tails it would have served, those at most
        ``prompt_len - p`` long); 0 when no position serves any; None when the namespace has no
        history (nothing to learn from yet). Pure."""
        tails = self._tails.get(_key(namespace))
        if tails is None:
            return None
        best, best_gain, served = 0, 0, 0
        for tail in tails.distinct:
            served += tails.count[tail]
            pos = (prompt_len - tail) // block_size * block_size
            # the longest tails come last: a position serving more of them is earlier, never later
            if pos > 0 and pos * served > best_gain:
                best, best_gain = pos, pos * served
        return best


def _key(namespace: str) -> bytes:
    # 128 bits: two namespaces' histories never mix in practice (and a mix would only move a
    # checkpoint, never change an output)
    return hashlib.blake2b(namespace.encode("utf-8", "surrogatepass"), digest_size=16).digest()
