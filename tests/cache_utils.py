"""Helpers shared by the cache tests (on `pythonpath`, like model_utils)."""

from __future__ import annotations

from radixflow.cache import RadixCache


def serve(cache: RadixCache, ns: str, tokens: tuple[int, ...], ckpts: list[int], rid: str) -> bool:
    """A request computes ``tokens`` from scratch (what is cached keeps its own KV), checkpoints
    at ``ckpts``, commits and lets go: everything it published is evictable afterwards (False:
    its reservation failed)."""
    need = len(tokens) // cache.block_size
    if not cache.reserve(need, len(ckpts)):
        return False
    blocks = cache.alloc_blocks(need)
    ext = cache.extend(ns, tokens, 0, len(tokens), blocks, ckpts, rid)
    cache.lock(ext.handle)
    cache.commit(rid)
    cache.unlock(ext.handle)
    cache.free_blocks(blocks)
    cache.check_integrity()
    return True


def seq(first: int, n: int) -> tuple[int, ...]:
    return tuple(range(first, first + n))


def snapshot(cache: RadixCache) -> list[tuple[object, ...]]:
    """Everything a node holds, every node, with the pools and the counts: two caches driven
    alike compare equal where each step did the same to both."""
    nodes = [
        (
            n.id, n.key, n.end, n.parent.id if n.parent else None, n.blocks, n.lock_ref, n.demand,
            n.ends, n.last_used, n.path_stamp, n.hits, n.aged, n.live_children, n.continues, n.closes_prompt,
            n.published_by, [(k, c.id) for k, c in n.children.items()],
            n.checkpoint and (n.checkpoint.slot, n.checkpoint.readiness, n.checkpoint.producer),
        )
        for n in cache.tree.nodes()
    ]  # fmt: skip
    pools = [(vars(pool)["_free"][:], pool.free) for pool in (cache.kv, cache.slots)]  # the order too
    return [*nodes, (cache.usage(), cache.evictions(), cache.ledger.promised, pools)]
