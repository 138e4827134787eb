"""`match` against a brute-force reference over what was published: whole blocks of KV, the deepest
checkpoint on them, for any limit (negative, inside a block, past the prompt)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from radixflow.cache import RadixCache

BS = 2

token_runs = st.lists(st.integers(0, 2), min_size=0, max_size=9).map(tuple)


def reference(published: list[tuple[tuple[int, ...], list[int]]], query: tuple[int, ...], limit: int):
    """(KV tokens, deepest checkpoint) of ``query[:limit]`` (nothing for a limit below 1)."""
    usable = query[: max(limit, 0) // BS * BS]
    kv = ckpt = 0
    for tokens, ckpts in published:
        n = 0
        while n + BS <= min(len(tokens) // BS * BS, len(usable)) and tokens[n : n + BS] == usable[n : n + BS]:
            n += BS
        kv = max(kv, n)
        ckpt = max([ckpt, *(p for p in ckpts if p <= n)])
    return kv, ckpt


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.tuples(token_runs, st.integers(0, 4)), min_size=1, max_size=4),
    query=token_runs,
    limit=st.integers(-2 * BS, 12),
)
def test_match_is_the_longest_published_prefix_and_its_deepest_checkpoint(prompts, query, limit):
    cache = RadixCache(BS, 64, 16)
    published = []
    for i, (tokens, ck) in enumerate(prompts):
        whole = len(tokens) // BS * BS
        ckpts = [min(ck * BS, whole)] if ck and whole else []
        cache.extend("n", tokens, 0, len(tokens), cache.alloc_blocks(-(-len(tokens) // BS)), ckpts, f"r{i}")
        cache.commit(f"r{i}")
        published.append((tokens, ckpts))
    m = cache.match("n", query, limit, touch=False)
    assert (m.kv_tokens, m.checkpoint_tokens) == reference(published, query, limit)
    assert m.checkpoint_ready and not m.blocked
