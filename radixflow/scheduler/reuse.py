"""Where an admitted request starts: its reuse point, and shallower ones to fall back on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from radixflow.cache.radix import RadixCache
from radixflow.cache.types import Match, NodeHandle
from radixflow.scheduler.request import Request


@dataclass(frozen=True)
class ReusePoint:
    tokens: int  # prompt tokens served from the cache
    handle: NodeHandle | None  # node to lock while the request needs them (None: the root)
    restore_slot: int | None  # checkpoint holding the state after ``tokens`` (None: zero state)
    # the checkpoint is PENDING: its producer's chunk saves it earlier in this very round
    same_round: bool = False


NO_REUSE = ReusePoint(0, None, None)


class ReuseFinder:
    """Reads the cache for the scheduler; knows what a model family may reuse."""

    def __init__(self, cache: RadixCache, block_size: int, has_recurrent: bool) -> None:
        self.cache = cache
        self.block_size = block_size
        self.has_recurrent = has_recurrent

    def match(self, req: Request, touch: bool = True) -> Match:
        """Best reuse of ``req``'s prompt (``touch`` refreshes the path's LRU clock)."""
        # Reuse at most up to the last whole block before the final token: that token's logits
        # must be computed.
        limit = (len(req.prompt) - 1) // self.block_size * self.block_size
        return self.cache.match(req.namespace, req.prompt, limit, touch=touch)

    def tokens(self, match: Match) -> int | None:
        """Prompt tokens the request can skip; None when its best checkpoint is still PENDING."""
        if not self.has_recurrent:
            return match.kv_tokens  # KV written earlier in this very round is usable
        return None if match.blocked else match.checkpoint_tokens

    def point(self, req: Request, match: Match) -> ReusePoint | None:
        """Where ``req`` would start (may split the tree); None for a blocked consumer."""
        tokens = self.tokens(match)
        if tokens is None:
            return None
        if not self.has_recurrent:
            return ReusePoint(tokens, self.cache.kv_handle(req.namespace, req.prompt, tokens), None)
        return ReusePoint(tokens, match.handle, match.checkpoint_slot)

    def pending_point(self, match: Match) -> ReusePoint:
        """The PENDING checkpoint of a blocked ``match`` as a reuse point: usable only by a chunk
        that runs after its producer's within the same round. Pure."""
        assert match.blocked, "not a PENDING checkpoint"
        return ReusePoint(match.checkpoint_tokens, match.handle, match.checkpoint_slot, same_round=True)

    def shallower(self, req: Request, below: int) -> Iterator[ReusePoint]:
        """READY checkpoints above position ``below`` on ``req``'s path, deepest first, then none."""
        while below > 0:
            match = self.cache.match(req.namespace, req.prompt, below - 1, touch=False)
            below = match.checkpoint_tokens
            if below > 0 and not match.blocked:
                yield ReusePoint(below, match.handle, match.checkpoint_slot)
        yield NO_REUSE
