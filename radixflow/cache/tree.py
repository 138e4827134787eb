"""The radix tree's structure: one tree per namespace, nodes indexed by id, paths and splits.

A namespace exists only while it holds something: its root is made by the first path through it
and dropped when its last child goes and no registered prompt ends on it. An empty root would
hold only its name (a client's cache salt, say), so keeping them would grow without bound.

Knows nothing of readiness, locks' meaning, rounds or eviction order. `RadixCache` holds one and
builds the cache on it; the `Evictor` frees nodes through `drop_kv` and `drop_checkpoint`; the
integrity check walks it through `roots` and `is_live`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from radixflow.cache.node import Node, common_blocks
from radixflow.cache.pool import IdPool
from radixflow.cache.types import NodeHandle

# Called after a split with (upper, lower): the new upper part, and the node cut below it.
SplitHook = Callable[[Node, Node], None]


def _no_hook(upper: Node, lower: Node) -> None:
    pass


class Tree:
    def __init__(self, block_size: int, kv: IdPool, slots: IdPool, on_split: SplitHook = _no_hook) -> None:
        if block_size < 1:
            raise ValueError("block_size must be >= 1")
        self.block_size = block_size
        self.kv = kv  # KV block ids: a materialized node owns one per block of its key
        self.slots = slots  # state slot ids: a checkpoint owns one
        self._on_split = on_split
        self._roots: dict[str, Node] = {}
        self._namespace_of: dict[int, str] = {}  # root id -> its namespace
        self._nodes: dict[int, Node] = {}
        self._next_id = 0
        # bumped by whatever can change a materialized node's path up to its root (a split, a
        # removal, KV dropped): while it holds, a path found once is still the path
        self.shape = 0

    # ----------------------------------------------------------------- walking (pure)
    def roots(self) -> Collection[Node]:
        """Each namespace's root, oldest first (a read-only live view). Pure."""
        return self._roots.values()

    def named_roots(self) -> Collection[tuple[str, Node]]:
        """(namespace, root) pairs, oldest first (a read-only live view). Pure."""
        return self._roots.items()

    def nodes(self) -> Collection[Node]:
        """Every node in the tree, roots included, oldest first (a read-only live view). Pure."""
        return self._nodes.values()

    def is_live(self, node: Node) -> bool:
        """Whether ``node`` is still in the tree (not pruned). Pure."""
        return self._nodes.get(node.id) is node

    def lookup(self, handle: NodeHandle) -> Node:
        """The node behind ``handle``; ValueError if it was pruned. Pure."""
        try:
            return self._nodes[handle.node_id]
        except KeyError:
            raise ValueError(f"stale cache handle {handle}") from None

    def find_node(self, handle: NodeHandle) -> Node | None:
        """The node behind ``handle``; None if it was pruned. Pure."""
        return self._nodes.get(handle.node_id)

    def find_root(self, namespace: str) -> Node | None:
        """The root of ``namespace``'s tree; None while the namespace holds nothing. Pure."""
        return self._roots.get(namespace)

    # ----------------------------------------------------------------- shaping
    def root(self, namespace: str) -> Node:
        """The root of ``namespace``'s tree; creates it on first use (mutates the index then).
        The caller hangs something on a new root at once (a child, or a registered prompt's end)
        or hands it to `drop_if_bare`."""
        root = self._roots.get(namespace)
        if root is None:
            root = self._roots[namespace] = self._new_node((), None, 0, blocks=[])
            self._namespace_of[root.id] = namespace
        return root

    def drop_if_bare(self, root: Node) -> None:
        """Forget ``root``'s namespace if it holds nothing: no child, no registered prompt ending on
        it (mutates the index then)."""
        assert root.parent is None
        if root.children or root.ends or not self.is_live(root):
            return
        del self._roots[self._namespace_of.pop(root.id)]
        del self._nodes[root.id]
        self.shape += 1

    def path(
        self, namespace: str, tokens: tuple[int, ...], nblocks: int, cuts: Sequence[int] = ()
    ) -> list[Node]:
        """Nodes covering the first ``nblocks`` blocks, creating/splitting so one ends exactly there
        and at every position in ``cuts`` (sorted, block-aligned).

        Mutates the tree: new nodes are unmaterialized; a split calls the split hook. No blocks: no
        nodes, and no root made for them.
        """
        if nblocks == 0:
            return []
        return self.descend(self.root(namespace), tokens, nblocks, cuts)

    def descend(
        self, node: Node, tokens: tuple[int, ...], nblocks: int, cuts: Sequence[int] = ()
    ) -> list[Node]:
        """`path`'s nodes below ``node``, whose path spells ``tokens[: node.end]`` (the caller
        checked): the rest of the walk to the first ``nblocks`` blocks, cut at ``cuts`` past
        ``node.end``. Mutates the tree as `path` does, whose walk is this one from the root."""
        bs, limit = self.block_size, nblocks * self.block_size
        pos, path, i = node.end, [], 0
        while pos < limit:
            while i < len(cuts) and cuts[i] <= pos:
                i += 1
            stop = min(cuts[i], limit) if i < len(cuts) else limit
            child = node.children.get(tokens[pos : pos + bs])
            if child is None:
                child = self._new_node(tokens[pos:stop], node, stop, blocks=None)
            # found by its first block (``stop`` is past it): a one-block child is shared whole
            shared = 1 if len(child.key) == bs else common_blocks(child.key, tokens, pos, bs, stop)
            if shared * bs < len(child.key):
                child = self._split(child, shared)
            path.append(child)
            node, pos = child, child.end
        return path

    def set_blocks(self, node: Node, blocks: list[int] | None) -> None:
        """Materialize (or, with None, dematerialize) ``node``: mutates its blocks and its parent's
        child count. Moves no block ids between pools."""
        assert node.parent is not None and (blocks is None) != (node.blocks is None)
        node.parent.live_children += 1 if blocks is not None else -1
        node.blocks = blocks
        if blocks is None:
            self.shape += 1

    def remove(self, node: Node) -> None:
        """Prune an unlocked leaf: unlinks it from its parent and the index (and forgets the
        namespace when that parent is a root left holding nothing)."""
        parent = node.parent
        assert parent is not None and not node.children and node.lock_ref == 0
        del parent.children[node.key[: self.block_size]]
        del self._nodes[node.id]
        self.shape += 1
        if parent.parent is None:
            self.drop_if_bare(parent)

    # ----------------------------------------------------------------- freeing
    def drop_kv(self, node: Node) -> None:
        """Free ``node``'s KV blocks and checkpoint into the pools, and prune the node when no
        waiting prompt wants it. Its parent may be left a KV leaf: the caller decides what follows."""
        assert node.parent is not None and node.blocks is not None
        self.kv.give(node.blocks)
        self.set_blocks(node, None)
        self.drop_checkpoint(node)
        if node.demand == 0:
            self.remove(node)

    def drop_checkpoint(self, node: Node) -> None:
        """Free ``node``'s checkpoint slot, if it has one; its KV stays."""
        if node.checkpoint is not None:
            self.slots.give([node.checkpoint.slot])
            node.checkpoint = None

    # ----------------------------------------------------------------- internals
    def _new_node(
        self, key: tuple[int, ...], parent: Node | None, end: int, blocks: list[int] | None
    ) -> Node:
        node = Node(id=self._next_id, key=key, parent=parent, end=end, blocks=blocks)
        self._next_id += 1
        self._nodes[node.id] = node
        if parent is not None:
            parent.children[key[: self.block_size]] = node
        return node

    def _split(self, node: Node, nblocks: int) -> Node:
        """Cut ``node`` after ``nblocks`` blocks; returns the new upper part (no checkpoint)."""
        bs, parent = self.block_size, node.parent
        assert parent is not None and 0 < nblocks * bs < len(node.key)
        upper_key, node.key = node.key[: nblocks * bs], node.key[nblocks * bs :]
        upper_blocks = None
        if node.blocks is not None:
            upper_blocks, node.blocks = node.blocks[:nblocks], node.blocks[nblocks:]
        upper = self._new_node(upper_key, parent, node.start, upper_blocks)
        upper.lock_ref, upper.demand, upper.last_used = node.lock_ref, node.demand, node.last_used
        upper.hits, upper.aged = node.hits, node.aged
        upper.continues = node.continues
        upper.live_children = int(node.materialized)
        upper.children[node.key[:bs]] = node
        node.parent = upper
        self.shape += 1
        self._on_split(upper, node)
        return upper
