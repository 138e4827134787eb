"""Eviction policies: which unlocked, READY cache entry goes first when capacity runs out.

A policy ranks entries of two kinds: a KV leaf (its blocks, and the checkpoint on it, which goes
with them) and a checkpoint alone (its KV stays). It sees the node itself (position, length, last
touch, hits, the inflation clock at that touch) and the sizes the engine passes down as plain
numbers (`EntrySizes`): the cache layer never asks a runner or a cost model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from radixflow.cache.node import Node
from radixflow.plugins import Registry

Priority = tuple[float, ...]


class EntryKind(Enum):
    KV = "kv"  # a KV leaf: its blocks (and the checkpoint on it, which cannot outlive them)
    CHECKPOINT = "checkpoint"  # a READY checkpoint alone: its KV stays


@dataclass(frozen=True)
class EntrySizes:
    """What cache entries weigh, decided where the engine is built (the cost model's shapes in the
    sim, the pools' tensors on the torch runner). Unknown sizes default to 1 byte: the ranking then
    weighs tokens alone. ``recurrent``: resuming needs a checkpoint (a hybrid model), so KV under
    which no checkpoint remains saves nothing. ``capacity``: the bytes the cache holds when full
    (its budget, or both pools full), which paces the clock before the first eviction
    (`CostPerByte.computed`); None: unknown, and the clock moves at evictions alone."""

    kv_bytes_per_token: int = 1
    checkpoint_bytes: int = 1
    recurrent: bool = True
    capacity: int | None = None

    def __post_init__(self) -> None:
        if self.kv_bytes_per_token < 1 or self.checkpoint_bytes < 1:
            raise ValueError(f"entry sizes must be at least one byte: {self}")
        if self.capacity is not None and self.capacity < 1:
            raise ValueError(f"cache capacity must be at least one byte: {self}")


# The odds of reuse credited to an entry without evidence of it (`evidenced`), against 1 for one
# with: a prior, not a measurement. Most such entries are one-off prompts' tails and turns that
# no conversation has continued yet; discounting them keeps the tails that conversations resume
# from when one-off traffic or a round of new conversations would flush them. Higher: closer to
# plain GreedyDual-Size; lower: unevidenced entries (contexts included, used or not) go sooner
# against conversations' tails.
UNEVIDENCED_ODDS = 0.25


def evidenced(node: Node) -> bool:
    """Whether ``node`` shows evidence of reuse: it ends a prompt that a request resumed from (a
    conversation continued there), or it continues such content (`Node.continues`: a
    conversation's next turn). Pure.

    A hit inside a prompt is no such evidence: a context that candidates fork from is resumed
    once per candidate of a finite group, so its hits count down the ones it has left, and
    crediting them would keep a spent context over a fresh one (GDSF's frequency has the same
    flaw; see `CostPerByte`). Such entries, used or fresh, are weighed alike: by recency and
    cost per byte."""
    return node.continues or (node.hits > 1 and node.closes_prompt)


class EvictionPolicy(Protocol):
    name: str
    # The inflation clock (GreedyDual's L): the cache stamps it on a node as ``Node.aged`` when a
    # request resumes there or computes it. It never decreases.
    clock: float
    # Whether an entry's priority depends on the tree around it (the checkpoint on it or those
    # above it, the prompts waiting through it): the cache then requeues the entries a change lowers.
    coupled: bool
    # Optional (default False): True where the policy reads no node's ``last_used`` but the ranked
    # node's own; a locked path's stamp may then wait on its deepest node (`Node.path_stamp`).

    def priority(self, node: Node, kind: EntryKind) -> Priority:
        """Sort key of ``node``'s entry of ``kind``; the smallest is evicted first. Pure.

        Keys may only grow as the node is touched (the queues are lazy heaps). A change of the tree
        that lowers one (the checkpoint on a KV leaf evicted) must be reported to the queue
        (`EvictionQueue.requeue`)."""
        ...

    def evicted(self, node: Node, kind: EntryKind) -> None:
        """``node``'s entry of ``kind`` is being evicted now. Mutates only the policy (may advance
        ``clock``); the node is the cache's, read it, never change it."""
        ...

    def computed(self, node: Node, tokens: int) -> None:
        """A request computed ``tokens`` more tokens of the cache's KV, its path ending at
        ``node``. Mutates only the policy (may advance ``clock``); the node is the cache's."""
        ...


class LRU:
    """Least recently used first, KV and checkpoints alike."""

    name = "lru"
    clock = 0.0  # never advances: recency is ``last_used`` alone
    coupled = False
    reads_own_stamp = True

    def __init__(self, sizes: EntrySizes | None = None) -> None:
        pass  # sizes play no part in recency

    def priority(self, node: Node, kind: EntryKind) -> Priority:
        return (node.last_used,)

    def evicted(self, node: Node, kind: EntryKind) -> None:
        pass

    def computed(self, node: Node, tokens: int) -> None:
        pass


class CostPerByte:
    """Evicts what costs least to recompute per byte freed, aged by recency: GreedyDual-Size
    (Cao and Irani, 1997) with the prompts known to be coming as its frequency. An entry's key is

        H = L + (P(reuse) + waiting) * cost / bytes

    with L the inflation clock when a request last resumed there (or computed it): each eviction
    raises the clock to the victim's H, so an entry unused for long falls behind newer ones, the
    cheaper to recompute per byte the sooner. A request that resumed below a node used its KV
    too: when a KV leaf goes, its parent takes over its L if later (`Evictor`), so a context's
    upper pieces do not keep the L of its first computation. Before the first eviction the
    clock has no victims to follow; it advances as work is computed instead (`computed`), so
    that the fill is not one instant. Waiting: the registered prompts through it
    (``demand``), hits known to be coming. P(reuse): 1 for an entry with evidence of reuse (a
    prompt's end that a request resumed from, or content continuing one: `evidenced`),
    `UNEVIDENCED_ODDS` for one without (a one-off prompt's tail, a conversation's first turn, a
    context inside prompts). Past hits are not counted as frequency (GDSF's), nor as evidence
    where they are a count: a group of candidates is finite, so the hits of the context they
    fork from do not predict the ones to come (in a group of K they count down what is left),
    and a count that only grows keeps a spent context over a fresh one.

    Cost is the prompt tokens the entry saves: a checkpoint, those from the nearest checkpoint
    above it to its own position (a request resumes there instead; a checkpoint inside a chain
    of them saves only its stretch). A KV leaf of a hybrid model is worth the checkpoint on it,
    lost with it, and nothing without one: no request can resume inside KV that no checkpoint
    closes (and a checkpoint cannot outlive its KV). Without recurrent layers, a KV leaf is worth
    its own tokens (resuming anywhere), so every KV byte weighs alike: recency, the prompts
    waiting through it and evidence of reuse decide, not its size.
    Bytes are the entry's real size (`EntrySizes`): under one budget a checkpoint as large as
    thousands of tokens of KV competes with KV at that weight. A KV leaf also holds the
    checkpoint-less KV above it (`_since_checkpoint_above`), useless without it: those tokens
    are in its cost, so they are in its bytes too.
    """

    name = "cost-per-byte"
    coupled = True
    reads_own_stamp = True

    def __init__(self, sizes: EntrySizes | None = None) -> None:
        self.sizes = sizes or EntrySizes()
        self.clock = 0.0
        self.warm = False  # an entry was evicted: the clock follows the victims' keys from now

    def value(self, node: Node, kind: EntryKind) -> float:
        """Tokens saved per byte held by ``node``'s entry of ``kind``, per hit. Pure."""
        sizes = self.sizes
        if kind is EntryKind.CHECKPOINT:
            return _since_checkpoint_above(node) / sizes.checkpoint_bytes
        if not sizes.recurrent:
            return 1 / sizes.kv_bytes_per_token
        if node.checkpoint is None:
            return 0.0
        # the KV above it back to that checkpoint is usable only through checkpoints at or below
        # it: the leaf holds those bytes too (`_since_checkpoint_above`)
        tokens = _since_checkpoint_above(node)
        return tokens / (tokens * sizes.kv_bytes_per_token + sizes.checkpoint_bytes)

    def priority(self, node: Node, kind: EntryKind) -> Priority:
        reuse = 1.0 if evidenced(node) else UNEVIDENCED_ODDS
        return (node.aged + (reuse + node.demand) * self.value(node, kind), node.last_used)

    def evicted(self, node: Node, kind: EntryKind) -> None:
        self.warm = True
        self.clock = max(self.clock, self.priority(node, kind)[0])

    def computed(self, node: Node, tokens: int) -> None:
        """Until the first eviction, advance the clock by the worth computed per byte of capacity:
        P(reuse) x ``tokens`` / ``sizes.capacity``. In a full cache of like entries GreedyDual's
        clock rises by one entry's worth per byte while the cache's bytes turn over once; this
        paces the fill the same way. A clock that stood still through it would stamp every entry
        the fill computed alike, so that the first evictions rank them by worth alone: then a
        context used last, split into pieces a little cheaper per byte than a whole one, goes
        first, piece by piece. Without a capacity the clock waits for evictions."""
        if self.warm or self.sizes.capacity is None:
            return
        reuse = 1.0 if evidenced(node) else UNEVIDENCED_ODDS
        self.clock += reuse * tokens / self.sizes.capacity


def _since_checkpoint_above(node: Node) -> int:
    """Tokens from the nearest checkpoint above ``node`` (or the start) to ``node``'s end. Pure.

    For a KV leaf with a checkpoint these are also the tokens of KV it holds: the KV above it
    back to that checkpoint serves a hybrid model only through the checkpoints below it (a
    request resumes at a checkpoint, never inside KV that none closes), so it is worth nothing
    once they are gone. A context split off a short leaf that holds its checkpoint (a split, a
    ladder of saves) is then worth its prefix per byte of the whole prefix, not of the leaf
    alone, and a tail below a context saved without a checkpoint does not pin that context at
    many times its worth. Charged in full to each branch below it, shared or not: a share would
    grow each time a sibling goes, lowering the others' keys (a requeue per eviction)."""
    above = node.parent
    while above is not None and above.checkpoint is None:
        above = above.parent
    return node.end - (above.end if above is not None else 0)


EVICTION_POLICIES: Registry[Callable[[EntrySizes | None], EvictionPolicy]] = Registry(
    "eviction policy",
    {
        "lru": LRU,
        "cost-per-byte": CostPerByte,
    },
)
