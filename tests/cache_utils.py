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
