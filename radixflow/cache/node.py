"""Radix-tree node: a run of whole blocks of tokens with its KV and an optional checkpoint."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixflow.cache.types import Readiness


@dataclass(eq=False)
class Checkpoint:
    """Recurrent state of every recurrent layer after the node's last token."""

    slot: int
    readiness: Readiness
    producer: str | None  # set while PENDING; the request whose round computes it


@dataclass(eq=False)
class Node:
    """Invariants (enforced by `check_integrity`):

    - ``len(key)`` is a positive multiple of the block size (the root's key is empty);
    - ``blocks`` is None (not materialized: known only from registered demand) or holds one
      KV block id per block of ``key``; materialization is prefix-closed (a materialized node
      has a materialized parent) and an unmaterialized node has ``demand > 0`` and no checkpoint;
    - ``lock_ref`` = locks held on this node + sum of the children's ``lock_ref``;
    - ``demand`` = registered prompts ending here (``ends``, never negative) + sum of the
      children's ``demand``;
    - a root keeps neither sum (its ``lock_ref`` and ``demand`` stay 0: nothing evicts or prunes a
      root by them), only ``ends``, the registered prompts shorter than a block;
    - ``live_children`` = number of materialized children (a root's too);
    - a PENDING checkpoint sits on a locked node;
    - ``published_by`` is set exactly on the nodes listed in the cache's round journal for it;
    - ``hits`` >= 1 and ``aged`` <= the eviction policy's clock;
    - ``path_stamp`` is 0 on an unlocked node.
    """

    id: int
    key: tuple[int, ...]
    parent: Node | None
    end: int  # absolute token position just after this node
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)  # first block -> child
    blocks: list[int] | None = None
    checkpoint: Checkpoint | None = None
    lock_ref: int = 0
    demand: int = 0
    ends: int = 0
    last_used: int = 0
    # an LRU stamp owed to this node and every ancestor, not yet written on them (0: none): a
    # decode step stamps its whole path, and writing one per node of a long sequence was most of
    # its cost. Only on a locked node (its ancestors are locked too, and no built-in policy reads
    # a locked node's stamp); written on the path when its lock goes (`Holdings.unlock`)
    path_stamp: int = 0
    hits: int = 1  # requests that resumed at this node (`RadixCache.resumed`), and the one that made it
    # the eviction policy's inflation clock when this node was last touched, or when a child
    # evicted since was (a request that resumed below it used its KV too)
    aged: float = 0.0
    live_children: int = 0  # children that are materialized (0: a KV leaf)
    # published below the end of a prompt that a request resumed from, or below such a node (a
    # conversation's next turn): evidence that it will be continued in turn. Set once, when the
    # KV is published, so that a node's eviction priority never drops.
    continues: bool = False
    # published as the last whole block of the sequence that computed it: where a follow-up of
    # that prompt (a conversation's next turn) resumes. A node inside a prompt (a context that
    # candidates fork from, the upper part of a split) is not. Set once, when the KV is published.
    closes_prompt: bool = False
    published_by: str | None = None  # producer whose current, uncommitted round wrote this KV

    @property
    def start(self) -> int:
        return self.end - len(self.key)

    @property
    def materialized(self) -> bool:
        return self.blocks is not None

    def ancestors(self) -> list[Node]:
        """This node and every ancestor up to (excluding) the root."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        return out


def common_blocks(key: tuple[int, ...], tokens: tuple[int, ...], at: int, block: int, end: int = -1) -> int:
    """Number of whole blocks ``key`` shares with ``tokens[at:end]`` (``end`` -1: to the end)."""
    end = len(tokens) if end < 0 else end
    limit = min(len(key), end - at) // block
    if key[: limit * block] == tokens[at : at + limit * block]:  # the common case, one comparison
        return limit
    n = 0
    while key[n * block : (n + 1) * block] == tokens[at + n * block : at + (n + 1) * block]:
        n += 1
    return n
