"""Radix cache: KV blocks and recurrent-state checkpoints in one exact-prefix tree (no torch)."""

from radixflow.cache.eviction import EVICTION_POLICIES, EvictionPolicy
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.integrity import IntegrityError
from radixflow.cache.pool import OutOfCapacity
from radixflow.cache.radix import RadixCache
from radixflow.cache.types import CacheUsage, Extension, Match, NodeHandle, Readiness

__all__ = [
    "EVICTION_POLICIES",
    "CacheUsage",
    "EvictionPolicy",
    "Extension",
    "IntegrityError",
    "Match",
    "NodeHandle",
    "OutOfCapacity",
    "RadixCache",
    "Readiness",
    "make_eviction_policy",
]
