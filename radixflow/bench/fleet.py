"""A fleet on one modelled clock: N engines behind a router, for studying routers in the sim.

Every replica is an `Engine` stepping on its own modelled time; the fleet always advances the
replica whose next round comes first, and routes each arrival when the clock reaches it, so the
router sees every replica's queue and checkpoints as they are at that moment: a replica whose round
is still running then is seen as it was when that round began, plus what was routed to it since
(the round answers and makes its checkpoints READY only as it ends). The routing decisions are the
`radixflow.fleet` routers', the very code the Ray Serve adapter runs.

A replica can be made to die mid-run: its unfinished requests are retried on the survivors
(latency still counts from their first arrival), or failed with an error when none is left.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from radixflow.cache.digest import CheckpointDigest
from radixflow.engine.engine import Engine
from radixflow.engine.records import SubmitRefused
from radixflow.fleet import Decision, ReplicaState, Router, RouteRequest
from radixflow.scheduler.request import Request, RequestStatus


@dataclass(frozen=True)
class ReplicaKill:
    replica: int  # index of the replica that dies
    at_s: float  # modelled time of its death


@dataclass
class SimReplica:
    name: str
    engine: Engine
    alive: bool = True
    routed: list[Decision] = field(default_factory=list)
    steps: int = 0
    _digest_at: int = -1  # steps taken when the digest was computed
    _digest: CheckpointDigest | None = None
    # the replica as its last round began, and the requests routed to it since: what a router sees
    # while that round runs (its answers and checkpoints come at its end)
    _before: ReplicaState | None = None
    _joined: int = 0

    def step(self, with_digest: bool) -> None:
        """Run the engine's next round (mutates the engine), remembering how it looked before."""
        self._before, self._joined = self._latest(with_digest), 0
        self.engine.step()
        self.steps += 1

    def submit(self, request: Request) -> None:
        self.engine.submit(request)
        self._joined += 1

    def state(self, now: float, with_digest: bool) -> ReplicaState:
        """What the router sees at modelled time ``now``."""
        if self._before is not None and self.engine.now > now:  # its round ends after ``now``
            return replace(self._before, queue=self._before.queue + self._joined)
        return self._latest(with_digest)

    def _latest(self, with_digest: bool) -> ReplicaState:
        """The engine as it is (the digest recomputed only after the engine stepped)."""
        if not with_digest:
            return ReplicaState(self.name, self.engine.queue_length())
        if self._digest is None or self._digest_at != self.steps:
            self._digest, self._digest_at = self.engine.routing_digest(), self.steps
        return ReplicaState(self.name, self.engine.queue_length(), self._digest)


@dataclass(frozen=True)
class QueueSample:
    t: float
    queues: tuple[int, ...]  # live replicas' queue lengths when a request arrived
    replicas: tuple[str, ...] = ()  # ... and their names, in the same order


@dataclass
class FleetRun:
    replicas: list[SimReplica]
    requests: list[Request]  # in the order given (the queue's); a retried request as its last attempt
    samples: list[QueueSample]
    retried: int = 0


def run_fleet(
    requests: Sequence[Request],
    make_engine: Callable[[], Engine],
    replicas: int,
    router: Router,
    kills: Sequence[ReplicaKill] = (),
) -> FleetRun:
    """Route and run ``requests`` (fresh, with arrival times) over ``replicas`` engines; a kill
    of a replica already dead does nothing. ValueError for fewer than one replica, a kill naming
    no replica, or two requests under one id (`SubmitRefused`, as one engine refuses the second)."""
    if replicas < 1:  # else every request failed as if the fleet's replicas had all died
        raise ValueError(f"a fleet needs at least 1 replica, got {replicas}")
    for kill in kills:
        if not 0 <= kill.replica < replicas:
            raise ValueError(f"{kill} names no replica (there are {replicas} replicas, 0 to {replicas - 1})")
    _refuse_twins(requests)
    fleet = [SimReplica(f"r{i}", make_engine()) for i in range(replicas)]
    run = FleetRun(fleet, [], [])
    latest: dict[str, Request] = {}
    arrivals = deque(sorted(requests, key=lambda r: r.arrival_s))
    deaths = deque(sorted(kills, key=lambda k: k.at_s))
    while True:
        t_arrival = arrivals[0].arrival_s if arrivals else math.inf
        step_at, replica = _next_step(fleet)
        if deaths and deaths[0].at_s <= min(step_at, t_arrival):
            death = deaths.popleft()
            _kill(run, fleet[death.replica], router, latest, death.at_s)
        elif replica is not None and step_at < t_arrival:
            replica.step(router.uses_digests)
        elif arrivals:
            req = arrivals.popleft()
            latest[req.id] = req
            _route(run, req, router, t_arrival)
        else:
            break
    # the order given, as a single engine keeps its requests: the outputs' digest reads them so
    run.requests = [latest[r.id] for r in requests]
    return run


def _refuse_twins(requests: Sequence[Request]) -> None:
    """`SubmitRefused` for an id two of ``requests`` share: on two replicas neither engine would
    refuse it, and the fleet keeps one answer per id. Pure."""
    seen: set[str] = set()
    for r in requests:
        if r.id in seen:
            raise SubmitRefused(f"duplicate request id {r.id!r}")
        seen.add(r.id)


def _next_step(fleet: list[SimReplica]) -> tuple[float, SimReplica | None]:
    best: tuple[float, SimReplica | None] = (math.inf, None)
    for replica in fleet:
        at = replica.engine.next_event_s() if replica.alive else None
        if at is not None and at < best[0]:
            best = (at, replica)
    return best


def _route(run: FleetRun, req: Request, router: Router, now: float) -> SimReplica | None:
    """Submit ``req`` to the replica the router picks among the live ones (returned), else fail it."""
    live = [r for r in run.replicas if r.alive]
    if not live:
        req.status, req.error, req.finish_s = RequestStatus.FAILED, "no replica is left to serve it", now
        return None
    states = [r.state(now, router.uses_digests) for r in live]
    run.samples.append(QueueSample(now, tuple(s.queue for s in states), tuple(s.name for s in states)))
    route = RouteRequest(req.namespace, req.prompt)
    decision = router.choose(route, states)
    target = next(r for r in live if r.name == decision.replica)
    target.routed.append(decision)
    target.submit(req)
    if req.status is RequestStatus.FAILED:  # refused at submit (a 400 on Ray): it cached nothing
        router.retract(route, decision.replica)
    return target


def _kill(run: FleetRun, dead: SimReplica, router: Router, latest: dict[str, Request], at: float) -> None:
    """``dead`` stops at ``at``: what it finished by then stays answered; the rest is retried
    elsewhere from then on (or fails)."""
    if not dead.alive:  # its unfinished requests were retried when it died
        return
    dead.alive = False
    router.forget(dead.name)
    # a round cannot be cut short: the one running at ``at`` has moved the dead engine past its
    # death, and what it finished came too late to be answered. An idle survivor a retry goes to
    # has its clock catch up with the death, so no retry runs before it.
    for old in dead.engine.requests:
        if old.status.done and (old.finish_s is None or old.finish_s <= at):
            continue
        retry = Request(old.id, old.prompt, old.namespace, old.arrival_s, sampling=old.sampling)
        latest[old.id] = retry
        run.retried += 1
        target = _route(run, retry, router, at)
        if target is not None:
            target.engine.now = max(target.engine.now, at)
