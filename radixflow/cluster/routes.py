"""Where each job in flight was sent, shared by the ingress (`RemoteLoop`) and the request router
Serve runs in the same process on a thread of its own (`FleetRequestRouter`): both reach it as
the ingress's `FleetFigures.routes`.

The router notes each replica Serve reports took a job (`routed`) and passes over those a job was
sent to when it comes again (`tried`): the ingress retries a job whose replica failed before it
sent anything, and Serve may still list that replica (an actor unavailable, or dead before Serve
has heard), which affinity would pick again (the router had just recorded the prefix there). The
ingress drops a job's entry when its flight ends (`ended`).
"""

from __future__ import annotations

import threading

# a safety net, not a limit that matters: entries leave as their flights end, and a job cancelled
# while Serve was still routing it may be noted after its end
MAX_JOBS = 1 << 16


class Routes:
    """Thread-safe: the router's thread notes, the ingress's event loop reads and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: dict[str, frozenset[str]] = {}  # job id -> the replicas it was sent to

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

    def ended(self, job_id: str) -> None:
        """Job ``job_id``'s flight is over: it is routed no more (mutates self)."""
        with self._lock:
            self._sent.pop(job_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sent)
