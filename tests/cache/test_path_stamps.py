"""LRU stamps owed to a locked path (`Node.path_stamp`): a decode step writes its chunk's nodes
and one stamp on its lock's node, not one per node of its sequence, and the cache evicts and
stamps exactly as if every node of the path had been written (a policy that reads other nodes'
stamps, an outside one, gets them written)."""

from __future__ import annotations

import random

import pytest
from cache_utils import seq

from radixflow.cache import RadixCache
from radixflow.cache.eviction import LRU, CostPerByte, EntrySizes
from radixflow.cache.node import Node


class EagerLRU(LRU):
    """LRU as an outside policy is run: every stamp written at once."""

    reads_own_stamp = False


class EagerCostPerByte(CostPerByte):
    reads_own_stamp = False


def stamps(cache: RadixCache) -> dict[int, int]:
    """Each node's stamp as if owed ones were written: the latest over its own and those owed
    below it (a path stamp covers the node it is on and every ancestor). Pure."""
    out: dict[int, int] = {}

    def walk(node: Node) -> int:
        latest = max([node.last_used, node.path_stamp, *(walk(c) for c in node.children.values())])
        out[node.id] = latest
        return latest

    for root in cache.tree.roots():
        for child in root.children.values():
            walk(child)
    return out


def test_a_decode_step_writes_its_chunk_and_one_owed_stamp() -> None:
    """Steps on a locked path leave the nodes above the lock as they were, the stamp owed on the
    lock's node; its unlock writes it on the whole path."""
    cache = RadixCache(2, 32, 4)
    prompt = seq(0, 8)
    blocks = cache.alloc_blocks(4)
    ext = cache.extend("n", prompt, 0, 8, blocks, [2, 4, 6], "r")  # four nodes
    cache.lock(ext.handle)
    cache.commit("r")
    above = cache.tree.lookup(ext.handle).ancestors()[1:]
    first = {node.id: node.last_used for node in above}
    lock, tokens, table = ext.handle, prompt, blocks
    for step in range(3):
        tokens += (100 + step,)
        n = len(tokens)
        table = table + cache.alloc_blocks(n % 2)
        ext = cache.extend("n", tokens, n - 1, n, table[(n - 1) // 2 :], [], "r", hint=lock)
        cache.relock(lock, ext.handle)
        lock = ext.handle
        cache.commit("r")
        cache.check_integrity()
    assert {node.id: node.last_used for node in above} == first
    owed = max(node.path_stamp for node in cache.tree.lookup(lock).ancestors())
    assert owed > max(first.values())
    cache.unlock(lock)
    cache.check_integrity()
    assert all(node.last_used == owed and node.path_stamp == 0 for node in above)


def _program(cache: RadixCache, rng: random.Random, steps: int) -> list[object]:
    """Requests decode from shared contexts beside lookups that touch, finishes that unlock and
    reservations that evict; returns what each step observed (victims included)."""
    seen: list[object] = []
    live: dict[str, tuple[tuple[int, ...], object, list[int]]] = {}
    contexts = [seq(1000 * k, 6) for k in range(3)]
    for i in range(steps):
        op = rng.choice(("start", "step", "step", "step", "touch", "finish", "reserve"))
        if op == "start" and len(live) < 4 and cache.reserve(8, 0):
            tokens = rng.choice(contexts) + (i,)
            kv = cache.match("n", tokens, len(tokens)).kv_tokens // 2 * 2
            handle = cache.kv_handle("n", tokens, kv) if kv else None
            cache.lock(handle)
            own = cache.alloc_blocks(-(-len(tokens) // 2) - kv // 2)
            ext = cache.extend("n", tokens, kv, len(tokens), own, [], f"r{i}", hint=handle)
            cache.relock(handle, ext.handle)
            cache.commit(f"r{i}")
            live[f"r{i}"] = (tokens, ext.handle, cache.block_table(handle) + own)
        elif op == "step" and live and cache.reserve(1, 0):
            rid = rng.choice(sorted(live))
            tokens, lock, table = live[rid]
            tokens += (rng.randrange(50),)
            table = table + cache.alloc_blocks(len(tokens) % 2)
            n = len(tokens)
            ext = cache.extend("n", tokens, n - 1, n, table[(n - 1) // 2 :], [], rid, hint=lock)
            cache.relock(lock, ext.handle)
            cache.commit(rid)
            live[rid] = (tokens, ext.handle, table)
        elif op == "touch":
            tokens = rng.choice(contexts) + (rng.randrange(steps),)
            seen.append(cache.match("n", tokens, len(tokens)))
        elif op == "finish" and live:
            _, lock, table = live.pop(rng.choice(sorted(live)))
            cache.unlock(lock)
            cache.free_blocks(table)
        elif op == "reserve":
            seen.append((cache.reserve(rng.randrange(8, 30), 0), cache.evictions()))
        cache.check_integrity()
        seen.append((cache.usage(), stamps(cache)))
    return seen


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("policy", [(LRU, EagerLRU), (CostPerByte, EagerCostPerByte)])
def test_owed_stamps_evict_and_stamp_as_written_ones(seed: int, policy: tuple[type, type]) -> None:
    """The same program on a cache that owes stamps and on one that writes them at once: the
    same victims, matches and stamps at every step."""
    lazy, eager = (RadixCache(2, 30, 8, eviction=p(EntrySizes())) for p in policy)
    assert _program(lazy, random.Random(seed), 300) == _program(eager, random.Random(seed), 300)
