"""Checkpoint digests: what a cache reports to a router, and how a prompt is compared with it."""

from __future__ import annotations

import subprocess
import sys
import zlib

from radixflow.cache import RadixCache
from radixflow.cache.digest import CheckpointDigest, chain_hashes

BS = 4
CTX = tuple(range(100, 116))  # 4 blocks
PROMPT = CTX + (1, 2, 3, 4, 5, 6, 7, 8, 9)  # 6 whole blocks and a token


def computed(cache: RadixCache, tokens: tuple[int, ...], end: int, ckpts: list[int], commit: bool) -> None:
    blocks = cache.alloc_blocks(-(-end // BS))
    cache.extend("n", tokens, 0, end, blocks, ckpts, "r")
    if commit:
        cache.commit("r")


def test_ready_checkpoints_are_reported_at_their_chain_hash():
    cache = RadixCache(BS, 64, 8)
    computed(cache, PROMPT, 24, [16, 24], commit=True)
    digest = cache.ready_digest()
    chain = chain_hashes("n", PROMPT, BS, 6)
    assert digest.hashes == {chain[3], chain[5]}
    assert digest.depth(chain) == 24
    assert digest.depth(chain[:5]) == 16  # a shorter prompt resumes from the shallower one


def test_pending_checkpoints_and_bare_kv_are_not_reported():
    cache = RadixCache(BS, 64, 8)
    computed(cache, PROMPT, 24, [16], commit=False)  # PENDING: its round has not finished
    assert cache.ready_digest().hashes == frozenset()
    cache.commit("r")
    assert len(cache.ready_digest().hashes) == 1


def test_kv_runs_report_node_ends_without_checkpoints():
    cache = RadixCache(BS, 64, 8)
    computed(cache, PROMPT, 24, [], commit=True)
    assert cache.ready_digest().hashes == frozenset()  # KV without a checkpoint: nothing to resume
    chain = chain_hashes("n", PROMPT, BS, 6)
    assert cache.ready_digest(kv_runs=True).depth(chain) == 24


def test_kv_runs_report_every_cached_block_a_prompt_can_resume_from():
    # an attention-only model resumes at any whole block of its KV: the digest named only node
    # ends, so a prompt sharing the first blocks of a cached run (a context, then its own
    # candidate) counted nothing there, though the cache reuses those blocks
    cache = RadixCache(BS, 64, 8)
    computed(cache, PROMPT, 24, [], commit=True)  # one run of 6 blocks
    sibling = CTX + (50, 51, 52, 53, 54)  # the context's 4 blocks, then its own
    chain = chain_hashes("n", sibling, BS, 4)
    assert cache.match("n", sibling, 16, touch=False).kv_tokens == 16
    assert cache.ready_digest(kv_runs=True).depth(chain) == 16
    assert cache.ready_digest().depth(chain) == 0  # with recurrent layers: no checkpoint there


def test_namespaces_and_prompts_do_not_collide():
    assert chain_hashes("a", CTX, BS, 4) != chain_hashes("b", CTX, BS, 4)
    assert chain_hashes("a", CTX, BS, 4)[:2] == chain_hashes("a", CTX[:8] + (0,) * 8, BS, 4)[:2]
    assert chain_hashes("a", CTX, BS, 4)[2] != chain_hashes("a", CTX[:8] + (0,) * 8, BS, 4)[2]
    assert len(chain_hashes("a", CTX[:7], BS, 4)) == 1  # whole blocks only
    assert CheckpointDigest(BS, frozenset()).depth(chain_hashes("a", CTX, BS, 4)) == 0


def test_chain_hashes_are_the_same_in_another_process():
    """A router compares hashes computed in replicas' processes (str hashes are salted there)."""
    code = "from radixflow.cache.digest import chain_hashes as c; print(c('ns', tuple(range(40)), 8, 5))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(chain_hashes("ns", tuple(range(40)), 8, 5))


def test_a_namespace_with_a_lone_surrogate_is_digested():
    """`LLM` and the engine take any str as a namespace, a lone UTF-16 surrogate included (the fork
    history digests it); the routing digest raised UnicodeEncodeError on one. Other namespaces
    hash as before."""
    ns = "salt\ud800"
    cache = RadixCache(BS, 64, 8)
    blocks = cache.alloc_blocks(4)
    cache.extend(ns, CTX, 0, 16, blocks, [16], "r")
    cache.commit("r")
    chain = chain_hashes(ns, CTX, BS, 4)
    assert cache.ready_digest().depth(chain) == 16
    assert chain != chain_hashes("salt", CTX, BS, 4)
    assert chain_hashes("é", CTX, BS, 1) == [hash((zlib.crc32("é".encode()), CTX[:BS]))]
