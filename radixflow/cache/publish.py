"""Publishing computed prefixes: a round's whole blocks and checkpoints enter the tree PENDING
(`extend`, `adopt_checkpoint`), and the round's end keeps them (`commit`) or undoes them
(`withdraw`), through the `RoundJournal`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from radixflow.cache import lookup
from radixflow.cache.evictable import Evictor
from radixflow.cache.eviction import evidenced
from radixflow.cache.holdings import Holdings
from radixflow.cache.node import Checkpoint, Node
from radixflow.cache.pool import OutOfCapacity
from radixflow.cache.rounds import RoundJournal
from radixflow.cache.tree import Tree
from radixflow.cache.types import Extension, NodeHandle, Readiness


class Publisher:
    """Moves what requests computed into the tree: their private blocks and working slots become
    the tree's (`Holdings`), new entries are offered to the `Evictor` once they may go."""

    def __init__(self, tree: Tree, journal: RoundJournal, evictor: Evictor, holdings: Holdings) -> None:
        self.tree, self.journal, self.evictor, self.holdings = tree, journal, evictor, holdings
        self.paths = lookup.SpelledPaths(tree)  # where each extend's path ended: the next one's hint
        # the policy ranks a node by no stamp but its own, and ranks no locked node: a locked
        # path's stamps may be owed (`Node.path_stamp`); an outside policy's are all written
        self.owes_stamps = getattr(evictor.policy, "reads_own_stamp", False)

    def extend(
        self,
        namespace: str,
        tokens: Sequence[int],
        start: int,
        end: int,
        blocks: Sequence[int],
        checkpoints: Sequence[int],
        producer: str,
        tick: int,
        hint: NodeHandle | None = None,
    ) -> Extension:
        """`RadixCache.extend`, the path stamped ``tick`` (its LRU clock)."""
        bs, tokens = self.tree.block_size, tuple(tokens)
        _check_chunk(bs, len(tokens), start, end, len(blocks), checkpoints)
        base = start // bs * bs  # the chunk's KV before this block is the tree's, locked by the caller
        cuts = sorted({*checkpoints, base})  # node boundaries at checkpoints and start
        known = self._known_path(namespace, tokens, base, cuts, hint)
        if known is None:
            published = lookup.match(self.tree, namespace, tokens, base, None).kv_tokens
            if published < base:
                raise ValueError(
                    f"chunk [{start}, {end}) starts past the {published} tokens of KV published before it"
                )
        self._check_slots(namespace, tokens, start, end, checkpoints)
        if known is not None:
            path = known + self.tree.descend(known[-1], tokens, end // bs, cuts)
        else:
            path = self.tree.path(namespace, tokens, end // bs, cuts)
        adopted, made, wanted = 0, {}, set(checkpoints)
        clock = self.evictor.policy.clock
        for node in path[self._owed_above(path, start, tick) :]:
            node.last_used = tick
            if node.end <= start:
                continue
            node.aged = clock  # computed now: enters the policy's order at the clock (no hit)
            if not node.materialized:
                first = node.start // bs - start // bs
                mine = blocks[first : first + len(node.key) // bs]
                adopted += self._adopt(node, mine, len(tokens), producer)
            if node.end in wanted and node.checkpoint is None:
                made[node.end] = self._pending_checkpoint(node, producer)
        if adopted:
            self.evictor.policy.computed(path[-1], adopted * bs)
        if path:  # every node materialized now, from the root: what `spelled` would find
            self.paths.remember(namespace, tokens, path)
        handle = NodeHandle(path[-1].id) if path else None
        return Extension(handle=handle, adopted=adopted, checkpoints=made)

    def _owed_above(self, path: list[Node], start: int, tick: int) -> int:
        """Where in ``path`` its stamps start to be written: below its deepest locked node before
        ``start``, whose stamp is owed on it and its ancestors instead (O(1) for a decode step, whose
        lock ends at or just above its chunk); 0 where the policy wants every stamp written."""
        i = len(path)
        if not self.owes_stamps:
            return 0
        while i and (path[i - 1].end > start or not path[i - 1].lock_ref):
            i -= 1
        if i:
            path[i - 1].path_stamp = tick
        return i

    def _known_path(
        self, namespace: str, tokens: tuple[int, ...], base: int, cuts: list[int], hint: NodeHandle | None
    ) -> list[Node] | None:
        """The nodes `tree.path` walks from the root to ``base``, found upward from ``hint`` (the
        caller's lock): where its node ends at ``base`` on ``tokens``' path with its KV, so the KV
        before the chunk is published, and every cut before ``base`` ends one of them, so the
        walk splits none. None otherwise: then the walks from the root. Pure."""
        if hint is None or base == 0:
            return None
        path = self.paths.take(namespace, tokens, hint)
        if not path or path[-1].end != base:
            return None
        inner = [c for c in cuts if c < base]
        if inner and not set(inner) <= {node.end for node in path}:
            return None
        return path

    def _check_slots(
        self, namespace: str, tokens: tuple[int, ...], start: int, end: int, checkpoints: Sequence[int]
    ) -> None:
        """OutOfCapacity, before `extend` changes anything, when the chunk's new checkpoints need
        more slots than the pool and the byte budget hold (`ByteLedger.slot_room`: the promised
        KV aside, as the chunk's own blocks, taken now, are still promised). Pure."""
        top = end // self.tree.block_size * self.tree.block_size
        asked = {p for p in checkpoints if start < p <= top}
        if not asked:  # most chunks (every decode step's but a block's last): no walk from the root
            return
        new = asked - lookup.checkpointed(self.tree, namespace, tokens, top)
        free = self.evictor.ledger.slot_room()
        if len(new) > free:
            raise OutOfCapacity(
                f"state slots: a chunk checkpointing at {sorted(new)} needs {len(new)}, {free} free"
            )

    def _adopt(self, node: Node, blocks: Sequence[int], length: int, producer: str) -> int:
        """``node`` takes ``blocks`` (a request's) as its KV, in a prompt of ``length`` tokens;
        returns how many."""
        bs = self.tree.block_size
        self.tree.set_blocks(node, list(blocks))
        # a continuation: below the end of a prompt a request resumed from (a conversation's next
        # turn); a branch below a context is a sibling (a candidate)
        parent = node.parent
        node.continues = parent is not None and evidenced(parent)
        node.closes_prompt = node.end == length // bs * bs
        self.holdings.adopted(node.blocks or [])
        self.journal.adopt(producer, node)
        return len(node.blocks or [])

    def _pending_checkpoint(self, node: Node, producer: str) -> int:
        """A PENDING checkpoint on ``node`` owned by ``producer``; returns its slot."""
        slot = self.tree.slots.take(1)[0]
        node.checkpoint = Checkpoint(slot, Readiness.PENDING, producer)
        self.journal.add_pending(producer, node)
        self.evictor.checkpoint_added(node)
        return slot

    def adopt_checkpoint(self, namespace: str, tokens: Sequence[int], position: int, slot: int) -> None:
        """`RadixCache.adopt_checkpoint`: a working slot becomes the READY checkpoint at ``position``."""
        if not lookup.published(self.tree, namespace, tokens, position):
            raise ValueError(f"checkpoint at {position}: not a block boundary of published KV")
        self.holdings.hand_over(slot)  # ValueError for a slot no request works in, changing nothing
        node = self.tree.path(namespace, tuple(tokens), position // self.tree.block_size)[-1]
        assert node.materialized and node.end == position, "published KV without a node ending there"
        if node.checkpoint is not None:
            self.tree.slots.give([slot])
            return
        node.checkpoint = Checkpoint(slot, Readiness.READY, None)
        node.aged = self.evictor.policy.clock
        self.evictor.checkpoint_added(node)
        self.evictor.offer(node)

    def commit(self, producer: str) -> None:
        """The producer's round finished: its PENDING checkpoints become READY (mutates them), and
        what it published unlocked is offered to the evictor (a locked path is, on its unlock)."""
        closed = self.journal.close(producer)
        for node in closed.pending:
            if node.checkpoint is not None and node.checkpoint.producer == producer:
                node.checkpoint.readiness = Readiness.READY
                node.checkpoint.producer = None
                self.evictor.offer(node)
        for node in closed.adopted:
            if node.lock_ref == 0 and self.tree.is_live(node):  # the scheduler's are locked: O(1)
                self.evictor.offer(node)

    def withdraw(self, producers: Iterable[str]) -> None:
        """`RadixCache.withdraw`: drop the producers' PENDING checkpoints and the KV they published.
        ValueError, changing nothing, while a lock still holds any of that KV."""
        producers = list(producers)
        published = self.journal.adopted_by_producer()
        for producer in producers:
            for node in published.get(producer, ()):
                if node.lock_ref:
                    raise ValueError(
                        f"withdraw of {producer}'s round: its KV at {node.start}..{node.end} is still locked"
                    )
        fresh: list[Node] = []
        for producer in producers:
            closed = self.journal.close(producer)
            for node in closed.pending:
                if node.checkpoint is not None and node.checkpoint.producer == producer:
                    self.tree.drop_checkpoint(node)
                    self.evictor.checkpoint_dropped(node)
            fresh.extend(closed.adopted)
        for node in sorted(fresh, key=lambda n: -n.end):  # deepest first: KV stays prefix-closed
            assert node.blocks is not None, "withdraw of a bare node"
            self.evictor.drop_kv(node)


def _check_chunk(bs: int, length: int, start: int, end: int, blocks: int, checkpoints: Sequence[int]) -> None:
    """ValueError, before `extend` changes anything, for a chunk the tree cannot take: one outside
    its ``length`` tokens, a checkpoint that is no block boundary (its node would end inside a
    block), or fewer ``blocks`` than the whole blocks the chunk's nodes may adopt. Pure."""
    if not 0 <= start <= end <= length:
        raise ValueError(f"chunk [{start}, {end}) of {length} tokens")
    for position in checkpoints:
        if position % bs:
            raise ValueError(f"checkpoint at {position}: not a block boundary ({bs} tokens a block)")
    need = end // bs - start // bs
    if blocks < need:
        raise ValueError(f"{blocks} KV blocks for the {need} whole blocks of chunk [{start}, {end})")
