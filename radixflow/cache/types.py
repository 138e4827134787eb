"""Result objects the cache hands to the scheduler. No tree internals leak through these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar


class Readiness(Enum):
    READY = "ready"
    PENDING = "pending"  # its producer's round has not finished yet


@dataclass(frozen=True)
class NodeHandle:
    """Opaque reference to a position in the tree; only the cache looks inside."""

    node_id: int


@dataclass(frozen=True)
class Match:
    """Best reuse point for a prompt.

    ``kv_tokens``: prompt tokens whose KV is present (usable by full-attention layers, including
    KV being written this round). For a model with recurrent layers the reuse point is the deepest
    checkpoint on the path, ``checkpoint_tokens``; it is usable only when ``checkpoint_ready``.
    """

    kv_tokens: int
    checkpoint_tokens: int
    checkpoint_ready: bool
    producer: str | None  # request computing the PENDING checkpoint, if any
    checkpoint_slot: int | None
    handle: NodeHandle | None  # node ending at the reuse point (None: the root)

    @property
    def blocked(self) -> bool:
        """The deepest checkpoint exists but is still PENDING."""
        return self.checkpoint_tokens > 0 and not self.checkpoint_ready


@dataclass(frozen=True)
class Sharing:
    """The deepest prefix of a registered prompt that other registered prompts share."""

    tokens: int  # its length (0: nothing shared)
    prompts: int  # registered prompts through it, the one asked about included
    node: NodeHandle | None  # the node ending there (None: nothing shared)

    NONE: ClassVar[Sharing]


Sharing.NONE = Sharing(0, 1, None)


@dataclass(frozen=True)
class Extension:
    """What `RadixCache.extend` did with a request's freshly computed blocks."""

    handle: NodeHandle | None  # deepest node of the computed whole blocks (lock this)
    adopted: int  # blocks whose ownership moved from the request to the tree
    checkpoints: dict[int, int]  # position -> state slot of each new PENDING checkpoint


@dataclass(frozen=True)
class CacheUsage:
    total_blocks: int
    free_blocks: int
    cached_blocks: int  # in the tree, evictable
    locked_blocks: int  # in the tree under a lock, or held privately by requests
    total_slots: int
    free_slots: int  # free in the pool (a budget may hold fewer: `RadixCache.free_slots`)
    checkpoint_slots: int
    working_slots: int  # held by running requests for chunk-to-chunk state
    namespaces: int  # namespaces holding cached KV or a registered prompt
