"""A benchmark workload: the engine's requests, and the benchmark's own tags for each of them.

The engine needs only what a request asks for; which shared context a request belongs to and
whether it is a candidate or an unrelated one is the benchmark's bookkeeping, kept here by id.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.scheduler.request import Request

CANDIDATE = "candidate"  # one of the K continuations of a shared context
INDEPENDENT = "independent"  # an unrelated request mixed into the queue


@dataclass(frozen=True)
class RequestTag:
    """What the benchmark knows about one request that the engine does not."""

    group: int | None = None  # the shared context it belongs to; None: in no group
    kind: str = CANDIDATE  # CANDIDATE or INDEPENDENT (a replayed trace may name its own kinds)


@dataclass(frozen=True)
class Workload:
    """Requests in queue order, and one tag per request id."""

    requests: list[Request]
    tags: dict[str, RequestTag]

    def __post_init__(self) -> None:
        ids = {r.id for r in self.requests}
        if len(ids) != len(self.requests) or ids != self.tags.keys():
            raise ValueError("a workload needs unique request ids and exactly one tag per request")

    def tag(self, request: Request) -> RequestTag:
        return self.tags[request.id]
