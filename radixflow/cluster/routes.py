"""Where each job in flight was sent, shared by the ingress (`RemoteLoop`) and the request router
Serve runs in the same process on a thread of its own (`FleetRequestRouter`): both reach it as
the ingress's `FleetFigures.routes`.

The router notes each replica Serve reports took a job (`routed`) and passes over those a job was
sent to when it comes again (`tried`): the ingress retries a job whose replica failed before it
sent anything, and Serve may still list that replica (an actor unavailable, or dead before Serve
has heard), which affinity would pick again (the router had just recorded the prefix there). The
ingress says when a replica refused a job (`refused`: a 429 or 503 before it ran), so the router
takes back the prefix it recorded there, and drops a job's entry when its flight ends (`ended`),
taking back its prefix wherever it went but the replica that sent a token or output of it: each
other failed it before sending anything (its retry ran elsewhere), or, when none ran it (its client
left, or the ingress answered it: a sibling's refusal, the drain, the fleet down), aborted it before
its first token, so none holds its prompt for its siblings to follow.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from radixflow.server.config import MAX_PENDING

if TYPE_CHECKING:
    from radixflow.cluster.wire import Job

# jobs in flight: as many as the ingress may hold (`--max-pending`), so none is dropped while it
# flies (entries leave as their flights end); past it only a bug's leftovers would be
MAX_JOBS = MAX_PENDING
# the marks of jobs ended unrun, wanted for moments (Serve's report of a send racing the client's
# leaving): the oldest go first, so a long run's aborts do not pile up
MAX_UNRUN = 1 << 16


class Routes:
    """Thread-safe: the router's thread notes, the ingress's event loop reads and drops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # job id -> the replicas it was sent to, once per send (a retry may find only the one it
        # failed on: the router recorded it there twice, and takes back each)
        self._sent: dict[str, tuple[str, ...]] = {}
        # the jobs whose flights ended unrun: a send Serve reports after that is not recorded
        self._unrun: OrderedDict[str, None] = OrderedDict()
        self._retract_watchers: list[Callable[[Job, str], None]] = []
        self._end_watchers: list[Callable[[str, Job | None], None]] = []

    def begun(self, job_id: str) -> None:
        """The ingress starts job ``job_id`` (mutates self): an earlier job's id, reused, is
        routed as any other."""
        with self._lock:
            self._unrun.pop(job_id, None)

    def routed(self, job_id: str, replica: str) -> bool:
        """Serve sent job ``job_id`` to ``replica`` (mutates self); False when its flight had
        ended unrun (its client left while Serve was routing it): the replica aborts it, and the
        router records nothing. Called under the router's lock, so a flight ending meanwhile takes
        back what was recorded."""
        with self._lock:
            if job_id in self._unrun:
                return False
            self._sent[job_id] = (*self._sent.pop(job_id, ()), replica)
            if len(self._sent) > MAX_JOBS:
                del self._sent[next(iter(self._sent))]  # the longest unheard of
            return True

    def open(self, job_id: str) -> bool:
        """Whether job ``job_id`` may still be sent: its flight did not end unrun."""
        with self._lock:
            return job_id not in self._unrun

    def tried(self, job_id: str) -> frozenset[str]:
        """The replicas job ``job_id`` was sent to so far (none: its first routing)."""
        with self._lock:
            return frozenset(self._sent.get(job_id, ()))

    def watch_ends(self, watcher: Callable[[str, Job | None], None]) -> None:
        """Call ``watcher`` with each job id whose flight ends, and the job when it never ran."""
        self._end_watchers.append(watcher)

    def watch_retractions(self, watcher: Callable[[Job, str], None]) -> None:
        """Call ``watcher`` with each job and a replica it was sent to that never ran it."""
        self._retract_watchers.append(watcher)

    def refused(self, job: Job, replica: str) -> None:
        """``replica`` refused ``job`` before it ran: tell the watchers, if it was sent there
        (mutates self: a later `ended` does not take it back twice)."""
        with self._lock:
            sent = self._sent.get(job.id, ())
            if replica in sent:  # one send fewer there
                i = sent.index(replica)
                self._sent[job.id] = sent[:i] + sent[i + 1 :]
        if replica in sent:  # else recorded nowhere (Serve reports no sends: Ray Client)
            self._retracted(job, replica)

    def ended(self, job_id: str, job: Job | None = None, ran_on: str | None = None) -> None:
        """Job ``job_id``'s flight is over: it is routed no more (mutates self). ``job``: the job,
        for the watchers to take back where it did not run: every replica it was sent to but
        ``ran_on``, the one that sent a token of it or its output (None: none did). Each other
        aborted it before its first token (a streamed prompt's; a plain one's answer is its first
        word), answered it with an error, or failed it before sending anything (its retry ran on
        ``ran_on``). What such a replica computed of it (a prefill cut short) shows in its
        reported checkpoints, which `checkpoint` reads."""
        never_ran = job if ran_on is None else None
        with self._lock:
            sent = list(self._sent.pop(job_id, ()))
            if never_ran is not None:
                self._unrun[job_id] = None
                if len(self._unrun) > MAX_UNRUN:
                    self._unrun.popitem(last=False)
        if ran_on in sent:  # the send that ran stays remembered; any other send there is taken back
            sent.remove(ran_on)
        if job is not None:
            for replica in sent:
                self._retracted(job, replica)
        for watcher in list(self._end_watchers):
            watcher(job_id, never_ran)

    def _retracted(self, job: Job, replica: str) -> None:
        for watcher in list(self._retract_watchers):
            watcher(job, replica)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sent)
