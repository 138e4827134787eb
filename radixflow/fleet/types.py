"""What a router sees of a replica and of a request, and what it decides."""

from __future__ import annotations

from dataclasses import dataclass, field

from radixflow.cache.digest import CheckpointDigest

MAX_REPLICAS = 1024  # the most replicas any door runs (`serve --replicas`, a cell's `replicas`)
AFFINITY = "affinity"  # sent where its prefix (a checkpoint, or what was sent there) is
PLACEMENT = "placement"  # a new context: placed where its later siblings will follow
BALANCE = "balance"  # the affine replica was overloaded: sent elsewhere
LOAD = "load"  # no affinity considered (pow2), or none found


@dataclass(frozen=True)
class ReplicaState:
    """A replica as the router sees it: its queue and where it can resume prompts."""

    name: str
    queue: int  # requests accepted and not answered
    digest: CheckpointDigest = field(default_factory=lambda: CheckpointDigest(16, frozenset()))
    alive: bool = True  # False: its last report says its engine loop died (it answers only 503s)


@dataclass(frozen=True)
class RouteRequest:
    namespace: str
    tokens: tuple[int, ...]  # the prompt


@dataclass(frozen=True)
class Decision:
    replica: str
    reason: str  # AFFINITY, PLACEMENT, BALANCE or LOAD
    depth: int = 0  # prompt tokens the router expects the replica to resume from
