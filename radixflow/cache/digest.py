"""Compact, process-independent names for cached prefixes: block-hash chains.

A prefix of whole blocks is named by a chain ``h_i = hash((h_{i-1}, block_i))`` seeded from its
namespace. Python's hash of a tuple of ints is the same in every process (only str/bytes hashes
are salted, and the seed uses crc32), so a router in one process can compare a prompt's chain
with the digests replicas in other processes report.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


def chain_hashes(namespace: str, tokens: Sequence[int], block_size: int, nblocks: int) -> list[int]:
    """Chain hash after each of the first ``nblocks`` whole blocks of ``tokens`` (fewer when the
    tokens run out). Pure."""
    h = namespace_seed(namespace)
    tokens = tuple(tokens)
    out: list[int] = []
    for i in range(min(nblocks, len(tokens) // block_size)):
        h = hash((h, tokens[i * block_size : (i + 1) * block_size]))
        out.append(h)
    return out


def namespace_seed(namespace: str) -> int:
    """The chain value before the first block (the empty prefix of ``namespace``). A lone UTF-16
    surrogate, which any str may hold and no UTF-8 encodes, is kept as its code unit
    (``surrogatepass``, as the fork history and the server's long salts do); other text hashes
    as plain UTF-8."""
    return zlib.crc32(namespace.encode("utf-8", "surrogatepass"))


def extend_chain(h: int, key: tuple[int, ...], block_size: int) -> Iterator[int]:
    """The chain values after each block of ``key``, continuing from ``h``."""
    for i in range(0, len(key), block_size):
        h = hash((h, key[i : i + block_size]))
        yield h


@dataclass(frozen=True)
class CheckpointDigest:
    """Where a cache can resume a prompt: chain hashes of the prefixes ending at its READY
    checkpoints (for a model with no recurrent layers, at every whole block of its cached KV)."""

    block_size: int
    hashes: frozenset[int]

    def depth(self, chain: Sequence[int]) -> int:
        """Tokens of the deepest prefix of ``chain`` (a prompt's chain hashes) named here; 0: none."""
        for i in range(len(chain) - 1, -1, -1):
            if chain[i] in self.hashes:
                return (i + 1) * self.block_size
        return 0
