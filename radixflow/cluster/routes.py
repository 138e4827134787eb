"""Where each job in flight was sent, shared by the ingress (`RemoteLoop`) and the request router
Serve runs in the same process on a thread of its own (`FleetRequestRouter`): both reach it as
the ingress's `FleetFigures.routes`.

The router notes each replica Serve reports took a job (`routed`) and passes over those a job was
sent to when it comes again (`tried`): the ingress retries a job whose replica failed before it
sent anything, and Serve may still list that replica (an actor unavailable, or dead before Serve
has heard), which affinity would pick again (the router had just recorded the prefix there). The
ingress says when a replica refused a job (`refused`: a 429 or 503 before it ran), so the router
takes back the prefix it recorded there, and drops a job's entry when its flight ends (`ended`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixflow.cluster.wire import Job

# a safety net, not a limit that matters: entries leave as their flights end, and a job cancelled
# while Serve was still routing it may be noted after its end
MAX_JOBS = 1 << 16


class Routes:
    """Thread-safe: the router's thread notes, the ingress's event loop reads and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, frozenset[str]] = {}  # job id -> the replicas it was sent to
        self._refusal_watchers: list[Callable[[Job, str], None]] = []

    def routed(self, job_id: str, replica: str) -> None:
        """Serve sent job ``job_id`` to ``replica`` (mutates self)."""
        with self._lock:
            self._sent[job_id] = self._sent.pop(job_id, frozenset()) | {replica}
            if len(self._sent) > MAX_JOBS:
                del self._sent[next(iter(self._sent))]  # the longest unheard of

    def tried(self, job_id: str) -> frozenset[str]:
        """The replicas job ``job_id`` was sent to so far (none: its first routing)."""
        with self._lock:
            return self._sent.get(job_id, frozenset())

    def watch_refusals(self, watcher: Callable[[Job, str], None]) -> None:
        """Call ``watcher`` with each job and the replica it was sent to that refused it."""
        self._refusal_watchers.append(watcher)

    def refused(self, job: Job, replica: str) -> None:
        """``replica`` refused ``job`` before it ran: tell the watchers, if it was sent there."""
        if replica in self.tried(job.id):  # else recorded nowhere (Serve reports no sends: Ray Client)
            for watcher in list(self._refusal_watchers):
                watcher(job, replica)

    def ended(self, job_id: str) -> None:
        """Job ``job_id``'s flight is over: it is routed no more (mutates self)."""
        with self._lock:
            self._sent.pop(job_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sent)
