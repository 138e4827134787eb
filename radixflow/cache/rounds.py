"""The round journal: what each producer's unfinished round put in the tree, so that `commit` can
keep it and `withdraw` can undo it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from radixflow.cache.node import Node


@dataclass(frozen=True)
class Round:
    """One producer's closed round: the nodes whose KV it published and the nodes it gave PENDING
    checkpoints (some may have lost them since)."""

    adopted: list[Node]
    pending: list[Node]


class RoundJournal:
    """Per producer, the nodes its current round published and the PENDING checkpoints it made.

    Invariant (checked by `check_integrity`): ``node.published_by`` is set exactly on the nodes
    journaled as adopted under that producer.
    """

    def __init__(self) -> None:
        self._adopted: dict[str, list[Node]] = {}
        self._pending: dict[str, list[Node]] = {}

    def adopt(self, producer: str, node: Node) -> None:
        """``producer``'s round published ``node``'s KV: journals it and sets ``node.published_by``."""
        node.published_by = producer
        self._adopted.setdefault(producer, []).append(node)

    def add_pending(self, producer: str, node: Node) -> None:
        """``producer``'s round gave ``node`` a PENDING checkpoint: journals it."""
        self._pending.setdefault(producer, []).append(node)

    def on_split(self, upper: Node, lower: Node) -> None:
        """The tree's split hook: a published node's new upper half was published by the same
        round, so it is journaled too."""
        if lower.published_by is not None:
            self.adopt(lower.published_by, upper)

    def close(self, producer: str) -> Round:
        """Forget ``producer``'s round and return what it journaled; clears the adopted nodes'
        ``published_by``."""
        adopted = self._adopted.pop(producer, [])
        for node in adopted:
            node.published_by = None
        return Round(adopted, self._pending.pop(producer, []))

    def adopted_by_producer(self) -> Mapping[str, tuple[Node, ...]]:
        """A read-only snapshot: producer -> nodes whose KV its round published. Pure."""
        return MappingProxyType({p: tuple(nodes) for p, nodes in self._adopted.items()})

    def pending_by_producer(self) -> Mapping[str, tuple[Node, ...]]:
        """A read-only snapshot: producer -> nodes given its PENDING checkpoints. Pure."""
        return MappingProxyType({p: tuple(nodes) for p, nodes in self._pending.items()})
