"""`RadixCache.extend`'s hint (the caller's lock) only speeds the walk: on random trees, a chunk
extended with any hint leaves the cache as one extended without, or is refused alike."""

from __future__ import annotations

from cache_utils import serve, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import RadixCache
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
