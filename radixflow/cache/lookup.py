"""Reading the tree for reuse: the longest reusable prefix of a prompt (`match`), a path's KV
block table, and the digest of every prefix a request could resume from (a router's view).
Nothing here changes the tree's structure; `match` may only refresh the LRU stamps it passes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from radixflow.cache.digest import CheckpointDigest, extend_chain, namespace_seed
from radixflow.cache.node import Node, common_blocks
from radixflow.cache.tree import Tree
from radixflow.cache.types import Match, NodeHandle, Readiness

NO_MATCH = Match(0, 0, True, None, None, None)


def match(tree: Tree, namespace: str, tokens: Sequence[int], limit: int, touch: int | None) -> Match:
    """Longest reusable prefix of the first ``limit`` tokens (none for a limit below 1, not the
    slice's count from the end); the materialized nodes it walks get ``last_used = touch``
    unless ``touch`` is None."""
    bs = tree.block_size
    tokens = tuple(tokens[: max(limit, 0) // bs * bs])
    root = tree.find_root(namespace)
    if root is None:  # the namespace holds nothing (a lookup makes no namespace)
        return NO_MATCH
    node, pos = root, 0
    best: Node | None = None
    while pos < len(tokens):
        child = node.children.get(tokens[pos : pos + bs])
        if child is None or not child.materialized:
            break
        if touch is not None:
            child.last_used = touch
        # found by its first block: a one-block child (every decoded block's) is shared whole
        shared = 1 if len(child.key) == bs else common_blocks(child.key, tokens, pos, bs)
        pos += shared * bs
        if shared * bs < len(child.key):
            break
        node = child
        if node.checkpoint is not None:
            best = node
    return _found(pos, best)


def spelled(tree: Tree, namespace: str, tokens: tuple[int, ...], handle: NodeHandle) -> list[Node] | None:
    """The materialized nodes from ``namespace``'s root down to ``handle``'s, when ``handle`` is
    live and their keys spell ``tokens`` up to its end: the path `match` would walk to it, found
    upward from the node (keys compared, no child looked up). None otherwise. Pure."""
    node: Node | None = tree.find_node(handle)
    path: list[Node] = []
    while node is not None and node.parent is not None:
        end, key = node.end, node.key
        if node.blocks is None or tokens[end - len(key) : end] != key:
            return None
        path.append(node)
        node = node.parent
    if node is None or node is not tree.find_root(namespace):
        return None
    path.reverse()
    return path


@dataclass(frozen=True)
class _Spelling:
    namespace: str
    tokens: tuple[int, ...]  # what the path spells: the tokens up to its end
    path: list[Node]


class SpelledPaths:
    """`spelled`'s answers, remembered by the node they end on while the tree keeps its shape
    (`Tree.shape`): a request's next chunk, hinted by its lock, then skips the walk up (a decode
    step's, one node per block of its sequence). A remembered answer is given only for the same
    node, namespace and tokens up to its end (compared whole, in one tuple comparison); anything
    else walks (`spelled`)."""

    TOKENS = 1 << 20  # tokens kept at most (8 MB of references; the oldest answers go first)

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self._shape = tree.shape  # the shape every remembered answer was found in
        self._known: dict[int, _Spelling] = {}  # node id -> its path, oldest first
        self._held = 0  # tokens in ``_known``
        # the tokens `take` last answered from memory and the spelling it found them to start
        # with: `remember` on the same tokens object, for a path ending where that spelling does
        # (a decode step inside a block), keeps that spelling instead of slicing them again
        self._answered: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def take(self, namespace: str, tokens: tuple[int, ...], handle: NodeHandle) -> list[Node] | None:
        """`spelled(tree, namespace, tokens, handle)`, forgetting what was remembered for
        ``handle`` (a lock moves down its path: asked once). The list is not to be mutated."""
        known = self._forget(handle.node_id) if self._shape == self.tree.shape else None
        self._answered = None
        if (
            known is not None
            and known.namespace == namespace
            and self.tree.find_node(handle) is known.path[-1]
            and tokens[: known.path[-1].end] == known.tokens
        ):
            self._answered = (tokens, known.tokens)
            return known.path
        return spelled(self.tree, namespace, tokens, handle)

    def remember(self, namespace: str, tokens: tuple[int, ...], path: list[Node]) -> None:
        """Keep ``path``, what `spelled` finds now for its last node on ``tokens`` (the caller
        made it so: every node materialized, from ``namespace``'s root)."""
        if self._shape != self.tree.shape:
            self._known.clear()
            self._shape, self._held = self.tree.shape, 0
        self._forget(path[-1].id)
        end, answered, self._answered = path[-1].end, self._answered, None
        if answered is not None and answered[0] is tokens and len(answered[1]) == end:
            spelling = _Spelling(namespace, answered[1], path)  # equal to ``tokens[:end]``: `take` compared
        else:
            spelling = _Spelling(namespace, tokens[:end], path)
        self._known[path[-1].id] = spelling
        self._held += len(spelling.tokens)
        while self._held > self.TOKENS:
            self._forget(next(iter(self._known)))

    def remembered(self) -> Iterator[tuple[str, tuple[int, ...], NodeHandle, list[Node]]]:
        """Each answer `take` would give now from memory: namespace, tokens, node, path. Pure."""
        if self._shape == self.tree.shape:
            for node_id, known in self._known.items():
                yield known.namespace, known.tokens, NodeHandle(node_id), known.path

    def _forget(self, node_id: int) -> _Spelling | None:
        known = self._known.pop(node_id, None)
        if known is not None:
            self._held -= len(known.tokens)
        return known


def published(tree: Tree, namespace: str, tokens: Sequence[int], position: int) -> bool:
    """Whether ``position`` is a block boundary after the first token within the KV published
    on ``tokens``' path: where a node can be made to end (a split) without making a bare one. Pure."""
    bs = tree.block_size
    if position <= 0 or position % bs:
        return False
    return match(tree, namespace, tokens, position, None).kv_tokens >= position


def checkpointed(tree: Tree, namespace: str, tokens: Sequence[int], limit: int) -> set[int]:
    """Positions up to ``limit`` on ``tokens``' path that hold a checkpoint (of any readiness). Pure."""
    bs, found = tree.block_size, set()
    tokens = tuple(tokens[: max(limit, 0) // bs * bs])
    node, pos = tree.find_root(namespace), 0
    while node is not None and pos < len(tokens):
        child = node.children.get(tokens[pos : pos + bs])
        if (
            child is None
            or not child.materialized
            or (len(child.key) > bs and common_blocks(child.key, tokens, pos, bs) * bs < len(child.key))
        ):
            break  # a checkpoint ends a materialized node: none past a partial or a bare one
        node, pos = child, child.end
        if node.checkpoint is not None:
            found.add(node.end)
    return found


def _found(kv_tokens: int, best: Node | None) -> Match:
    """The `Match` of ``kv_tokens`` matched KV whose deepest checkpoint is on ``best``."""
    ckpt = best.checkpoint if best is not None else None
    return Match(
        kv_tokens=kv_tokens,
        checkpoint_tokens=best.end if best is not None else 0,
        checkpoint_ready=ckpt is None or ckpt.readiness is Readiness.READY,
        producer=ckpt.producer if ckpt is not None else None,
        checkpoint_slot=ckpt.slot if ckpt is not None else None,
        handle=NodeHandle(best.id) if best is not None else None,
    )


def block_table(tree: Tree, handle: NodeHandle | None) -> list[int]:
    """KV block ids from the root to the end of ``handle``'s node. Pure."""
    if handle is None:
        return []
    table: list[int] = []
    for node in reversed(tree.lookup(handle).ancestors()):
        assert node.blocks is not None
        table.extend(node.blocks)
    return table


def ready_digest(tree: Tree, kv_runs: bool) -> CheckpointDigest:
    """Chain hashes (`radixflow.cache.digest`) of every prefix ending at a READY checkpoint;
    ``kv_runs``: at every whole block of a materialized node instead (a model without recurrent
    layers resumes at any block of its KV, not only where a node ends). Pure."""
    found: set[int] = set()
    for namespace, root in tree.named_roots():
        found.update(_ready_hashes(root, namespace_seed(namespace), tree.block_size, kv_runs))
    return CheckpointDigest(tree.block_size, frozenset(found))


def _ready_hashes(root: Node, seed: int, block_size: int, kv_runs: bool) -> Iterator[int]:
    """`ready_digest`'s chain hashes under one namespace's ``root``, whose chain starts at
    ``seed``. Like `match`, a branch ends at a node that is not materialized: no request resumes
    past it. Pure."""
    stack = [(root, seed)]
    while stack:
        node, h = stack.pop()
        for child in node.children.values():
            if not child.materialized:
                continue
            chain = list(extend_chain(h, child.key, block_size))
            if kv_runs:
                yield from chain
            elif _ready(child):
                yield chain[-1]
            stack.append((child, chain[-1]))


def _ready(node: Node) -> bool:
    return node.checkpoint is not None and node.checkpoint.readiness is Readiness.READY
