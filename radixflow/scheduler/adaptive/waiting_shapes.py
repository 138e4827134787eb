"""What a waiting request would cost now (its shape), and which shapes a round made stale.

A request's key is the prompt work it costs per request it completes: a consumer (its prefix is
checkpointed) costs its own remaining tokens; a request whose prefix other waiting prompts share,
and nobody has computed yet, costs its work and theirs after reuse, per request. So ready
consumers rank first, then producers with the most dependents, then lone work.

Members of one shared prefix (a group) change shape together: when one arrives, or one is taken
(its siblings become consumers once it runs). Their registrations are found through the cache's
tree below the group's node, at most `GROUP_WALK` nodes and `GROUP_WALK` requests (copies of one
prompt end at one node), so a change costs a bounded walk.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from radixflow.cache.types import NodeHandle
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.scan import PolicyContext

# registered prompts re-keyed when their group changes: a larger group's key hardly moves with
# one member more or less
GROUP_WALK = 64


@dataclass(frozen=True)
class Shape:
    remaining: int  # prompt tokens to compute from its reuse point
    dependents: int  # other waiting prompts that would reuse the checkpoint it computes
    key: float  # prompt tokens per request completed, itself and its dependents together
    group: NodeHandle | None  # the shared prefix whose members' keys move together
    consumer: bool  # it reuses a checkpoint


class Shapes:
    """Shapes of the waiting requests, where their registrations end, and the groups changed
    since last asked."""

    def __init__(self, context: PolicyContext) -> None:
        self._ctx = context
        # registration node id -> its waiting requests by id, in arrival order (by id: copies of
        # one prompt all end at one node, and a list's removal walked them all)
        self._by_end: dict[int, dict[str, Request]] = {}
        self._end: dict[str, int] = {}  # request id -> its registration node id (kept past release)
        self._dirty: dict[int, NodeHandle] = {}  # groups whose members must be re-keyed

    def of(self, request: Request, reuse: int | None = None) -> Shape:
        """``request``'s shape starting at ``reuse`` tokens (None: where the cache says it would,
        a blocked consumer at its PENDING checkpoint). Pure."""
        if reuse is None:
            match = self._ctx.reuse.match(request, touch=False)
            ready = self._ctx.reuse.tokens(match)
            reuse = match.checkpoint_tokens if ready is None else ready
        n = len(request.prompt)
        remaining = n - reuse
        if request.registration is None:
            return Shape(remaining, 0, float(remaining), None, reuse > 0)
        share = self._ctx.cache.sharing(request.registration)
        if share.tokens <= reuse:  # what it shares is computed already: a consumer (or lone)
            return Shape(remaining, 0, float(remaining), share.node, reuse > 0)
        dependents = share.prompts - 1
        key = (remaining + dependents * (n - share.tokens)) / share.prompts
        return Shape(remaining, dependents, key, share.node, reuse > 0)

    def arrived(self, request: Request) -> Shape:
        """A request joined the queue: remember it; its group changed (mutates the book)."""
        shape = self.of(request)
        if request.registration is not None:
            self._end[request.id] = request.registration.node_id
            self._by_end.setdefault(request.registration.node_id, {})[request.id] = request
        self.touch(shape)
        return shape

    def touch(self, shape: Shape) -> None:
        """The members of ``shape``'s group must be re-keyed (mutates the book)."""
        if shape.group is not None:
            self._dirty[shape.group.node_id] = shape.group

    def stale(self) -> Iterator[Request]:
        """Waiting members of every group touched since the last call (clears the touches)."""
        dirty, self._dirty = self._dirty, {}
        for group in dirty.values():
            yield from self.members(group)

    def members(self, group: NodeHandle) -> Iterator[Request]:
        """Waiting requests registered under ``group``: at most `GROUP_WALK` of them, at most
        `GROUP_WALK` nodes visited (copies of one prompt all end at one node, so the nodes alone
        do not bound them). Pure."""
        ends = self._ctx.cache.registered_under(group, GROUP_WALK)
        waiting = (
            req
            for end in ends
            for req in self._by_end.get(end.node_id, {}).values()
            if req.status is RequestStatus.WAITING
        )
        yield from itertools.islice(waiting, GROUP_WALK)

    def forget(self, request: Request) -> None:
        """``request`` left the queue (mutates the book)."""
        end = self._end.pop(request.id, None)
        if end is None:
            return
        same = self._by_end.get(end, {})
        same.pop(request.id, None)
        if not same:
            self._by_end.pop(end, None)
