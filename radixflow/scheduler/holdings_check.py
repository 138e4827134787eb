"""Between rounds: what the cache holds on behalf of requests (path locks, private KV blocks,
working state slots; `radixflow.cache.holdings`) is exactly what the requests the scheduler still
runs record holding. The cache cannot check this itself: it does not know which requests are live,
so a request ended part way through giving its holdings back left them held for good, unseen.

O(holdings + waiting requests): no tree walk."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from radixflow.cache import IntegrityError, RadixCache
from radixflow.scheduler.request import Request


def check_holdings(cache: RadixCache, running: Iterable[Request], waiting: Iterable[Request]) -> None:
    """Raise `IntegrityError` at the first lock, private block or working slot held for no running
    request, or recorded by a running request and not held in the cache, or held by a waiting one;
    or when the prompts registered (demand) are not those of the waiting and running requests.
    Pure."""
    running, waiting = list(running), list(waiting)
    _check_registrations(cache, [*running, *waiting])
    for req in waiting:  # a request takes its holdings as it is admitted, gives them back as it leaves
        held = req.lock is not None or req.own_blocks or (req.working_slot, req.tail_slot) != (None, None)
        _require(not held, f"request {req.id}: waiting, yet holds a lock, blocks or a state slot")
    _check_locks(cache, running)
    _check_blocks(cache, running)
    _check_slots(cache, running)


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise IntegrityError(msg)


def _check_registrations(cache: RadixCache, live: list[Request]) -> None:
    # per handle, not in all: a registration lost and another leaked would cancel out in a count
    recorded = Counter(r.registration for r in live if r.registration is not None)
    held = cache.registrations
    for req in live:
        handle = req.registration
        if handle is not None:
            _require(held.get(handle, 0) >= recorded[handle], f"request {req.id}: prompt not registered")
    for handle, count in held.items():
        extra = count - recorded[handle]
        _require(extra <= 0, f"{extra} registered prompt(s) of no live request at {handle}")


def _check_locks(cache: RadixCache, running: list[Request]) -> None:
    recorded = Counter(r.lock.node_id for r in running if r.lock is not None)
    held = cache.lock_counts
    for nid, count in held.items():
        extra = count - recorded[nid]
        _require(extra <= 0, f"node {nid}: {extra} lock(s) held by no running request")
    for req in running:
        nid = None if req.lock is None else req.lock.node_id
        if nid is not None:
            _require(held.get(nid, 0) >= recorded[nid], f"request {req.id}: lock on node {nid} not held")


def _check_blocks(cache: RadixCache, running: list[Request]) -> None:
    owner: dict[int, str] = {}
    private = cache.private_blocks
    for req in running:
        for block in req.own_blocks:  # private, or adopted by the tree (still taken in the pool)
            _require(block not in owner, f"KV block {block}: held by both {owner.get(block)} and {req.id}")
            owner[block] = req.id
            _require(cache.kv.taken(block), f"request {req.id}: its KV block {block} is free in the cache")
    for block in private:
        _require(block in owner, f"KV block {block}: private to no running request")


def _check_slots(cache: RadixCache, running: list[Request]) -> None:
    owner: dict[int, str] = {}
    working = cache.working_slots
    for req in running:
        for slot in (req.working_slot, req.tail_slot):
            if slot is None:
                continue
            _require(slot not in owner, f"state slot {slot}: held by both {owner.get(slot)} and {req.id}")
            owner[slot] = req.id
            _require(slot in working, f"request {req.id}: state slot {slot} not a working slot")
    for slot in working:
        _require(slot in owner, f"state slot {slot}: the working slot of no running request")
