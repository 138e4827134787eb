"""The `radixflow.fleet` routers as a Ray Serve `RequestRouter`: Serve asks it to rank replicas
for each job; it asks the very router class the fleet simulation uses.

A replica's queue is Serve's own count of requests in flight there (its queue-length cache,
updated on every send), else what the replica last reported; its digest is what
`EngineReplica.record_routing_stats` last reported; so are the engine figures it hands the
ingress's `/metrics` (`fleet_metrics.FleetFigures`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from radixflow.cache.digest import CheckpointDigest
from radixflow.cluster.fleet_metrics import Report, published
from radixflow.fleet import DEFAULT_ROUTER, ReplicaState, RouterConfig, RouteRequest, make_router

DEFAULT_BLOCK_SIZE = 16  # before a replica has reported (its digest is empty then anyway)


def engine_reports(replicas: Iterable[RunningReplica]) -> dict[str, Report | None]:
    """Each replica's last reported engine figures (None: none yet), by its id. Pure."""
    return {r.replica_id.unique_id: (r.routing_stats or {}).get("engine") for r in replicas}


def dead_replicas(replicas: Iterable[RunningReplica]) -> set[str]:
    """The ids of the replicas whose last report says their engine loop has failed. Pure."""
    return {r.replica_id.unique_id for r in replicas if not (r.routing_stats or {}).get("alive", True)}


class FleetRequestRouter(RequestRouter):
    def initialize_state(
        self, router: str = DEFAULT_ROUTER, seed: int = 0, figures: str | None = None, **_: Any
    ) -> None:
        """Serve passes ``request_router_kwargs`` here; ``figures``: where the ingress collects
        the replicas' engine figures (`fleet_metrics.published`)."""
        self._router = make_router(router, RouterConfig(seed=seed))
        self._figures = published(figures)
        self._routes = None if self._figures is None else self._figures.routes  # shared with the ingress
        # the ingress's retractions come on its own thread: the router's memory is touched under this
        self._lock = threading.Lock()
        # job id -> the replica its prefix is recorded on before Serve says where it went (with the
        # ingress's figures only: they say when a job ends, so nothing is left recorded unsent)
        self._planned: dict[str, str] = {}
        if self._routes is not None:
            self._routes.watch_retractions(self._retracted)
            self._routes.watch_ends(self._ended)
        self._known: set[str] = set()  # the replicas of the last update (their ids)

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        """Serve calls this with the replicas running, whenever one's routing stats change."""
        super().update_replicas(replicas)
        # a replica Serve replaced (its health check failed: its engine loop died or is stuck)
        # leaves the set here, not in on_replica_actor_died: no job died with its actor
        running = {r.replica_id.unique_id for r in replicas}
        with self._lock:
            for gone in self._known - running:
                self._router.forget(gone)
        self._known = running
        if self._figures is not None:
            self._figures.update(engine_reports(replicas), dead_replicas(replicas))

    def _state(self, replica: RunningReplica) -> ReplicaState:
        stats = replica.routing_stats or {}
        queue = self.replica_queue_len_cache.get(replica.replica_id)
        if queue is None:
            queue = int(stats.get("queue", 0))
        digest = CheckpointDigest(
            int(stats.get("block_size", DEFAULT_BLOCK_SIZE)), frozenset(stats.get("checkpoints", ()))
        )
        alive = bool(stats.get("alive", True))  # not reported yet: starting, so alive
        return ReplicaState(replica.replica_id.unique_id, queue, digest, alive)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        """Ranks: Serve sends the job to the first rank with room, and again after a backoff
        when none had any. The first rank is remembered now (`_plan`), moved in
        `on_request_routed` where Serve sent it elsewhere."""
        job = _job(pending_request)
        if job is None or not candidate_replicas:
            return [candidate_replicas]  # not a generation job (e.g. describe): any replica
        # replicas that refused the job before (`Job.avoid`), or that it was sent to before (a
        # retry: that one failed it), are passed over while live others are left: a dead one would
        # answer it with its failure, where a refuser may take it now
        avoid = job.avoid | (frozenset() if self._routes is None else self._routes.tried(job.id))
        offered = [
            r for r in candidate_replicas if r.replica_id.unique_id not in avoid and self._state(r).alive
        ]
        candidate_replicas = offered or candidate_replicas
        states = [self._state(r) for r in candidate_replicas]
        with self._lock:
            decision = self._router.decide(RouteRequest(job.namespace, tuple(job.prompt)), states)
            if self._routes is not None and self._routes.open(job.id):
                self._plan(job, decision.replica)
        chosen = [r for r in candidate_replicas if r.replica_id.unique_id == decision.replica]
        alive = {s.name for s in states if s.alive}
        rest = [
            r
            for r in candidate_replicas
            if r.replica_id.unique_id != decision.replica and r.replica_id.unique_id in alive
        ]
        return [chosen, rest] if rest else [chosen]  # the live rest: only if Serve finds it full

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any) -> None:
        """Serve calls this once a replica took the job (its strict ``max_ongoing_requests``, on
        by default outside Ray Client): the router remembers that replica, its first rank's
        record moved there if that is another."""
        super().on_request_routed(pending_request, replica_id, result)
        job = _job(pending_request)
        if job is None:
            return
        replica, request = replica_id.unique_id, RouteRequest(job.namespace, tuple(job.prompt))
        with self._lock:  # a flight ending meanwhile retracts under it: after this record
            planned = self._planned.pop(job.id, None)
            taken = self._routes is None or self._routes.routed(job.id, replica)
            if planned is not None and (planned != replica or not taken):
                self._router.retract(request, planned)  # Serve sent it elsewhere (the first rank full)
            if taken and planned != replica:
                self._router.record(request, replica)

    def _plan(self, job: Any, replica: str) -> None:
        """Under the lock: record ``job``'s prefix on ``replica``, its first rank, now, not once
        Serve says it went there (after that replica accepted it): its siblings ranked meanwhile
        (a context's candidates come together) follow it, not each placed as a new context on the
        least loaded replica, the one it was not just sent to. A job ranked again (a backoff) moves."""
        request = RouteRequest(job.namespace, tuple(job.prompt))
        before = self._planned.get(job.id)
        if before == replica:
            return
        if before is not None:
            self._router.retract(request, before)
        self._router.record(request, replica)
        self._planned[job.id] = replica

    def _ended(self, job_id: str, never_ran: Any) -> None:
        """The ingress's word that job ``job_id``'s flight ended; ``never_ran``: the job, when it
        never ran anywhere, so its first rank (still waiting for room) is taken back too."""
        with self._lock:
            planned = self._planned.pop(job_id, None)
            if planned is not None and never_ran is not None:
                self._router.retract(RouteRequest(never_ran.namespace, tuple(never_ran.prompt)), planned)

    def _retracted(self, job: Any, replica: str) -> None:
        """The ingress's word (on its thread) that ``replica``, which Serve reported took ``job``,
        never ran it (it refused it, a 429 or 503; it failed it before sending anything and a retry
        ran it elsewhere; or the job ended before its first token came, its client gone): the
        prefix recorded there goes, so the job's siblings do not follow it to a replica that never
        cached it."""
        with self._lock:
            self._router.retract(RouteRequest(job.namespace, tuple(job.prompt)), replica)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        with self._lock:
            self._router.forget(replica_id.unique_id)


def _job(pending_request: PendingRequest | None) -> Any:
    """The generation job ``pending_request`` carries (a `wire.Job`); None for another call. Pure."""
    job = pending_request.args[0] if pending_request is not None and pending_request.args else None
    return job if hasattr(job, "prompt") else None
