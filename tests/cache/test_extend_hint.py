"""`RadixCache.extend`'s hint (the caller's lock) only speeds the walk: on random trees, a chunk
extended with any hint leaves the cache as one extended without, or is refused alike."""

from __future__ import annotations

import contextlib

from cache_utils import serve, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import RadixCache, lookup
from radixflow.cache.pool import OutOfCapacity
from radixflow.cache.types import NodeHandle

BS = 2
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=12).map(tuple)  # few ids: paths share


def _boundaries(data: st.DataObject, upto: int) -> list[int]:
    return data.draw(st.lists(st.sampled_from(range(0, upto + 1, BS)), max_size=3, unique=True))


def _hint(data: st.DataObject, caches: list[RadixCache], tokens: tuple[int, ...]) -> NodeHandle | None:
    """A lock at a block boundary of ``tokens``' published KV (split alike in both caches), as a
    request's lock after a chunk, or any node (none, pruned, off the path, a root)."""
    if data.draw(st.booleans()):
        at = data.draw(st.sampled_from(range(BS, len(tokens) + 1, BS) or [BS]))
        try:
            _, hinted = (c.kv_handle("n", tokens, at) for c in caches)  # both split alike
            return hinted
        except ValueError:  # no KV published there: refused alike, changing nothing
            return None
    return NodeHandle(data.draw(st.integers(-1, caches[0].tree._next_id)))


def _extend(cache: RadixCache, tokens, start, end, ckpts, hint) -> object:
    """The extension, or the refusal; the round then commits, as the scheduler's would."""
    blocks = cache.alloc_blocks(max(end // BS - start // BS, 0))
    try:
        ext = cache.extend("n", tokens, start, end, blocks, ckpts, "r", hint=hint)
    except ValueError as e:
        cache.free_blocks(blocks)
        return repr(e)
    cache.lock(ext.handle)
    cache.commit("r")
    cache.unlock(ext.handle)
    cache.free_blocks(blocks)
    cache.check_integrity()
    return ext


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_extend_with_a_hint_leaves_the_cache_as_without(data: st.DataObject) -> None:
    plain, hinted = RadixCache(BS, 64, 32), RadixCache(BS, 64, 32)
    for i, prompt in enumerate(data.draw(st.lists(TOKENS, max_size=4))):
        ckpts = [p for p in _boundaries(data, len(prompt)) if p]
        assert serve(plain, "n", prompt, ckpts, f"s{i}") and serve(hinted, "n", prompt, ckpts, f"s{i}")
    tokens = data.draw(TOKENS)
    end = data.draw(st.integers(0, len(tokens)))
    start = data.draw(st.integers(0, end))
    ckpts = sorted(p for p in _boundaries(data, end) if p)  # below the chunk's block too: cuts
    hint = _hint(data, [plain, hinted], tokens)
    assert snapshot(hinted) == snapshot(plain)
    assert _extend(hinted, tokens, start, end, ckpts, hint) == _extend(plain, tokens, start, end, ckpts, None)
    assert snapshot(hinted) == snapshot(plain)


def _step(
    cache: RadixCache, tokens: tuple[int, ...], start: int, end: int, lock: NodeHandle | None
) -> NodeHandle | None:
    """The request's chunk ``[start, end)`` extended from its lock (the hint), the lock moved to
    the chunk's end and the round committed, as the scheduler's: its new lock (OutOfCapacity when
    the pool is short, taking nothing)."""
    blocks = cache.alloc_blocks(end // BS - start // BS)
    ext = cache.extend("n", tokens, start, end, blocks, [], "r", hint=lock)
    cache.relock(lock, ext.handle)
    cache.commit("r")
    cache.free_blocks(blocks)  # the ones the tree did not adopt (a partial block)
    return ext.handle


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_remembered_path_is_what_the_walk_up_finds(data: st.DataObject) -> None:
    """`SpelledPaths.take` (an extend's path, remembered for the next chunk's hint) answers as
    `lookup.spelled`, for any namespace, tokens and node, as a request's chunks go on beside
    other prompts that split its path (sharing some of its tokens) or, in a scarce cache, evict."""
    cache = RadixCache(BS, 16, 8)
    tokens = data.draw(st.lists(st.integers(0, 2), min_size=2, max_size=24).map(tuple))
    lock, at = None, 0
    for i in range(data.draw(st.integers(1, 8))):
        if data.draw(st.booleans()) and at < len(tokens):
            end = data.draw(st.integers(at + 1, min(at + 8, len(tokens))))
            with contextlib.suppress(OutOfCapacity):  # the pool is short: the request waits
                lock, at = _step(cache, tokens, at, end, lock), end
        else:
            shared = tokens[: data.draw(st.integers(0, len(tokens)))]
            serve(cache, data.draw(st.sampled_from("nnm")), shared + data.draw(TOKENS), [], f"s{i}")
        cache.check_integrity()  # each remembered path too
        probe = tokens if data.draw(st.booleans()) else data.draw(TOKENS)
        namespace = data.draw(st.sampled_from("nnm"))
        hint = (
            lock
            if lock is not None and data.draw(st.booleans())
            else NodeHandle(data.draw(st.integers(-1, 99)))
        )
        expected = lookup.spelled(cache.tree, namespace, probe, hint)
        assert cache.publisher.paths.take(namespace, probe, hint) == expected
