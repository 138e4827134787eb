"""Demand: the waiting prompts registered in the tree, before anything is computed for them.

A registered prompt's whole blocks are nodes of the tree (unmaterialized where no KV exists yet)
with ``demand`` counted along the path and ``ends`` on its last node, so forks between known
prompts are branch points and a policy can see which prefixes others share. Costs no capacity.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from radixflow.cache.evictable import Evictor
from radixflow.cache.tree import Tree
from radixflow.cache.types import NodeHandle, Sharing


def register(tree: Tree, namespace: str, tokens: Sequence[int]) -> NodeHandle:
    """Record a waiting prompt's whole blocks in ``tree`` (mutates demand, may split nodes)."""
    tokens = tuple(tokens)
    path = tree.path(namespace, tokens, len(tokens) // tree.block_size)
    for node in path:
        node.demand += 1
    end = path[-1] if path else tree.root(namespace)
    end.ends += 1
    return NodeHandle(end.id)


def unregister(tree: Tree, evictor: Evictor, handle: NodeHandle) -> None:
    """Undo `register`; prunes nodes that are neither materialized nor wanted. ValueError for a
    handle no registered prompt ends on (unregistered already), changing nothing."""
    end = tree.lookup(handle)
    if end.ends == 0:  # its node outlived the prompt (cached KV): demand would go negative
        raise ValueError(f"unregister of a prompt not registered at {handle}")
    end.ends -= 1
    for node in end.ancestors():
        node.demand -= 1
    evictor.demand_dropped(end)
    for node in end.ancestors():
        if node.demand == 0 and not node.materialized:
            tree.remove(node)  # the last one may take its namespace with it
    if end.parent is None:  # a prompt shorter than a block ends on its namespace's root
        tree.drop_if_bare(end)


def branch_points(tree: Tree, handle: NodeHandle, lo: int, hi: int) -> list[int]:
    """Positions in ``(lo, hi]`` on a registered path where known sequences diverge. Pure."""
    return sorted(n.end for n in tree.lookup(handle).ancestors() if lo < n.end <= hi and len(n.children) > 1)


def sharing(tree: Tree, handle: NodeHandle) -> Sharing:
    """The deepest prefix of registered path ``handle`` that other registered prompts share
    (`Sharing.NONE` when none does). Pure."""
    for node in tree.lookup(handle).ancestors():  # deepest first
        if node.demand > 1:
            return Sharing(node.end, node.demand, NodeHandle(node.id))
    return Sharing.NONE


def registered_under(tree: Tree, handle: NodeHandle, limit: int) -> list[NodeHandle]:
    """Where registered prompts through node ``handle`` end (their `register` handles), at most
    ``limit`` nodes visited, nearest first; [] when the node is gone. Pure."""
    try:
        top = tree.lookup(handle)
    except ValueError:
        return []
    found: list[NodeHandle] = []
    frontier, visited = deque([top]), 0
    while frontier and visited < limit:
        node = frontier.popleft()
        visited += 1
        if node.ends:
            found.append(NodeHandle(node.id))
        frontier.extend(node.children.values())
    return found
