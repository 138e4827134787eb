"""Routers: which replica serves a request. One Protocol, a registry, three policies.

Pure Python on purpose: the fleet simulation and the Ray Serve adapter call the same classes, so
every routing decision is made by the same lines in both.

- ``pow2``: power of two choices on queue length (Ray Serve's default).
- ``prefix``: prompt-prefix affinity from the router's own memory of what it sent where, blind to
  whether a state checkpoint exists there (like Ray Serve LLM's PrefixCacheAffinityRouter).
- ``checkpoint``: the replica with the deepest usable READY checkpoint for the prompt (from the
  digests replicas report), unless it is overloaded; a new context (nothing, or under
  ``match_threshold`` of the prompt, resumable or sent anywhere) goes to a lightly loaded replica
  and the router remembers it, so its later siblings follow it there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from radixflow.cache.digest import chain_hashes
from radixflow.fleet.memory import DEFAULT_CAPACITY, PrefixMemory
from radixflow.fleet.types import AFFINITY, BALANCE, LOAD, PLACEMENT, Decision, ReplicaState, RouteRequest
from radixflow.plugins import Registry, from_outside
from radixflow.problems import Problem, ProblemError, built, shown


@dataclass(frozen=True)
class RouterConfig:
    seed: int = 0
    # a replica is overloaded when its queue exceeds both ratio x the mean queue and mean + slack
    imbalance_ratio: float = 1.5
    imbalance_slack: int = 2
    match_threshold: float = 0.1  # the least share of a prompt matched to count as a hit
    block_size: int = 16  # the granularity of a router's memory of what it sent where
    memory: int = DEFAULT_CAPACITY  # chain hashes a router remembers


class Router(Protocol):
    name: str
    uses_digests: bool  # reads ReplicaState.digest (callers may skip computing it otherwise)

    def decide(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        """The replica for ``request`` (``replicas`` non-empty; one reported dead is picked only
        when all are). Mutates only the router's random state: what it decides is not where the
        request goes until `record` says so (Ray Serve may send it to a later rank)."""
        ...

    def record(self, request: RouteRequest, replica: str) -> None:
        """``request`` went to ``replica``: remember it (mutates the router's memory)."""
        ...

    def retract(self, request: RouteRequest, replica: str) -> None:
        """``replica`` refused ``request`` after it was recorded there (a 429 or 503 before it
        ran): it never cached the prompt, so its siblings must not follow it there (mutates the
        router's memory)."""
        ...

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        """`decide`, then `record` the request there (where the caller always sends it)."""
        ...

    def forget(self, replica: str) -> None:
        """``replica`` is gone: drop what the router remembers about it (mutates the memory)."""
        ...


def overloaded(replica: ReplicaState, replicas: Sequence[ReplicaState], config: RouterConfig) -> bool:
    mean = sum(r.queue for r in replicas) / len(replicas)
    return replica.queue > max(config.imbalance_ratio * mean, mean + config.imbalance_slack)


def usable_blocks(tokens: tuple[int, ...], block_size: int) -> int:
    """Whole blocks a replica could resume from: at least the last prompt token is computed."""
    return max(len(tokens) - 1, 0) // block_size


def prompt_chain(request: RouteRequest, block_size: int) -> list[int]:
    """Chain hashes of the prompt's usable whole blocks of ``block_size`` tokens. Pure."""
    return chain_hashes(
        request.namespace, request.tokens, block_size, usable_blocks(request.tokens, block_size)
    )


def hit(depth: int, floor: float) -> int:
    """``depth`` if it is a hit (at least ``floor`` tokens, a share of the prompt), else 0: a
    shared preamble is no reason to send a prompt to a busier replica, on placement or spill. Pure."""
    return depth if depth >= floor else 0


def in_service(replicas: Sequence[ReplicaState]) -> list[ReplicaState]:
    """The replicas whose engine loop runs; all of them when none does (each answers a 503 naming
    its failure: an answer, not a hang). A dead replica answers at once, so its queue looks the
    shortest: picking it would pour traffic into errors until it is replaced. Pure."""
    return [r for r in replicas if r.alive] or list(replicas)


def decided(router: Router, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
    """``router``'s decision for ``request``, recorded as where it went (each router's `choose`)."""
    decision = router.decide(request, replicas)
    router.record(request, decision.replica)
    return decision


def least_loaded(replicas: Sequence[ReplicaState], rng: random.Random) -> ReplicaState:
    low = min(r.queue for r in replicas)
    return rng.choice([r for r in replicas if r.queue == low])


class PowerOfTwo:
    name = "pow2"
    uses_digests = False

    def __init__(self, config: RouterConfig) -> None:
        self.rng = random.Random(config.seed)

    def decide(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        live = in_service(replicas)
        pair = self.rng.sample(live, min(2, len(live)))
        return Decision(least_loaded(pair, self.rng).name, LOAD)

    def record(self, request: RouteRequest, replica: str) -> None:
        pass  # it remembers nothing

    def retract(self, request: RouteRequest, replica: str) -> None:
        pass

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return decided(self, request, replicas)

    def forget(self, replica: str) -> None:
        pass


class PrefixAffinity:
    """Longest prompt prefix the router sent somewhere, if it covers ``match_threshold`` of the
    prompt and the fleet is balanced; otherwise power of two choices."""

    name = "prefix"
    uses_digests = False

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.pow2 = PowerOfTwo(config)
        self.memory = PrefixMemory(config.memory)

    def decide(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        chain = prompt_chain(request, self.config.block_size)
        return self._decide(request, in_service(replicas), chain)

    def record(self, request: RouteRequest, replica: str) -> None:
        self.memory.record(prompt_chain(request, self.config.block_size), replica)

    def retract(self, request: RouteRequest, replica: str) -> None:
        self.memory.retract(prompt_chain(request, self.config.block_size), replica)

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return decided(self, request, replicas)

    def _decide(self, request: RouteRequest, replicas: Sequence[ReplicaState], chain: list[int]) -> Decision:
        if any(overloaded(r, replicas, self.config) for r in replicas):  # imbalanced: balance first
            return self.pow2.decide(request, replicas)
        depths = self.memory.depths(chain, self.config.block_size)
        live = [r for r in replicas if r.name in depths]
        deepest = max((depths[r.name] for r in live), default=0)
        if live and deepest >= self.config.match_threshold * len(request.tokens):
            best = least_loaded([r for r in live if depths[r.name] == deepest], self.pow2.rng)
            return Decision(best.name, AFFINITY, deepest)
        return Decision(self.pow2.decide(request, replicas).replica, PLACEMENT)

    def forget(self, replica: str) -> None:
        self.memory.forget(replica)


class CheckpointAffinity:
    """Deepest usable READY checkpoint (reported digests), else where the router already sent
    the prompt's prefix (its checkpoint is on its way there); overloaded replicas are passed over."""

    name = "checkpoint"
    uses_digests = True

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.memory = PrefixMemory(config.memory)

    def decide(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        replicas = in_service(replicas)
        # each digest is read at its own block size (one not reported yet has the default), the
        # router's memory at its own
        sizes = {r.digest.block_size for r in replicas} | {self.config.block_size}
        chains = {bs: prompt_chain(request, bs) for bs in sizes}
        floor = self.config.match_threshold * len(request.tokens)
        ready = {r.name: hit(r.digest.depth(chains[r.digest.block_size]), floor) for r in replicas}
        chain = chains[self.config.block_size]
        planned = self.memory.depths(chain, self.config.block_size)
        expect = {r.name: max(ready[r.name], hit(planned.get(r.name, 0), floor)) for r in replicas}
        open_ = [r for r in replicas if not overloaded(r, replicas, self.config)] or list(replicas)
        best = max(open_, key=lambda r: (expect[r.name], ready[r.name], -r.queue, self.rng.random()))
        deepest = max(expect.values())
        if deepest == 0:
            # a new context (sharing at most a preamble): somewhere light; its siblings follow it
            return Decision(least_loaded(open_, self.rng).name, PLACEMENT)
        if expect[best.name] == deepest:
            return Decision(best.name, AFFINITY, deepest)
        return Decision(best.name, BALANCE, expect[best.name])

    def record(self, request: RouteRequest, replica: str) -> None:
        self.memory.record(prompt_chain(request, self.config.block_size), replica)

    def retract(self, request: RouteRequest, replica: str) -> None:
        self.memory.retract(prompt_chain(request, self.config.block_size), replica)

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return decided(self, request, replicas)

    def forget(self, replica: str) -> None:
        self.memory.forget(replica)


# every door's router when none is named (`serve --replicas`, an experiment cell, Serve's router):
# the one that knows a hybrid model resumes only from a READY checkpoint (docs/fleet.md)
DEFAULT_ROUTER = "checkpoint"
ROUTERS: Registry[Callable[[RouterConfig], Router]] = Registry(
    "router",
    {
        "pow2": PowerOfTwo,
        "prefix": PrefixAffinity,
        "checkpoint": CheckpointAffinity,
    },
)


def router_problem(name: object) -> Problem | None:
    if name not in ROUTERS:
        return Problem("router", f"unknown router {name!r} (known: {', '.join(ROUTERS)})")
    return None


def make_router(name: str, config: RouterConfig | None = None) -> Router:
    """The router called ``name``; `ProblemError` (param ``router``) for an unknown one, or for an
    entry added from outside that cannot serve as a `Router` (docs/extending.md)."""
    problem = router_problem(name)
    if problem is not None:
        raise ProblemError(problem)
    made: Router = built(
        "router", name, ROUTERS[name], Router, (config or RouterConfig(),), takes="factory(config)"
    )
    return CheckedRouter(name, made) if from_outside(type(made)) else made


@dataclass(frozen=True)
class CheckedRouter:
    """A router from outside the package (docs/extending.md) whose decisions are checked to name
    a replica it was shown, a live one while any is: one that does not stops the run with one
    line naming it and what it returned (a `ProblemError` on ``router``), not a StopIteration
    from the fleet sim nor an empty rank handed to Ray Serve."""

    name: str
    inner: Router

    @property
    def uses_digests(self) -> bool:
        return self.inner.uses_digests

    def decide(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return self._checked("decide", self.inner.decide(request, replicas), replicas)

    def choose(self, request: RouteRequest, replicas: Sequence[ReplicaState]) -> Decision:
        return self._checked("choose", self.inner.choose(request, replicas), replicas)

    def record(self, request: RouteRequest, replica: str) -> None:
        self.inner.record(request, replica)

    def retract(self, request: RouteRequest, replica: str) -> None:
        self.inner.retract(request, replica)

    def forget(self, replica: str) -> None:
        self.inner.forget(replica)

    def _checked(self, method: str, got: object, replicas: Sequence[ReplicaState]) -> Decision:
        why = _misrouted(got, replicas)
        if why is not None or not isinstance(got, Decision):
            called = f"{self.name!r} ({type(self.inner).__qualname__}) {method} returned {shown(got)}"
            raise ProblemError(Problem("router", f"{called}: {why}"))
        return got


def _misrouted(got: object, replicas: Sequence[ReplicaState]) -> str | None:
    """Why ``got`` is no answer of `Router.decide` among ``replicas`` (None: it is). Pure."""
    if not isinstance(got, Decision):
        return "not a Decision"
    named = {r.name: r for r in replicas}
    if got.replica not in named:
        return f"{shown(got.replica)} is none of the replicas {shown(sorted(named))}"
    if not named[got.replica].alive and any(r.alive for r in replicas):  # it answers only 503s
        return f"{shown(got.replica)} is reported dead while another is live"
    return None
