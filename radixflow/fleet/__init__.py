"""Routing requests over engine replicas (pure Python: no ray, no torch).

The fleet simulation and the Ray Serve adapter share these classes, so both make the same
decisions."""

from radixflow.fleet.routers import DEFAULT_ROUTER, ROUTERS, Router, RouterConfig, make_router, router_problem
from radixflow.fleet.types import (
    AFFINITY,
    BALANCE,
    LOAD,
    MAX_REPLICAS,
    PLACEMENT,
    Decision,
    ReplicaState,
    RouteRequest,
)

__all__ = [
    "AFFINITY",
    "BALANCE",
    "DEFAULT_ROUTER",
    "LOAD",
    "MAX_REPLICAS",
    "PLACEMENT",
    "ROUTERS",
    "Decision",
    "ReplicaState",
    "RouteRequest",
    "Router",
    "RouterConfig",
    "make_router",
    "router_problem",
]
