"""A fleet's engine figures at its ingress: each replica's own `ServerMetrics` engine series, as it
reports them with its routing stats (`engine_samples`), rendered in the single server's series.

- counters and histograms (rounds, tokens computed and generated, evictions by kind, prediction
  errors): summed over every replica that ever reported, a replaced one's last totals included,
  so no sum goes backwards;
- gauges of the fleet's capacity and load (cache bytes by kind, budget, waiting and running
  requests, tokens/s): summed over the replicas running now;
- `PER_REPLICA` gauges, which do not add up (a namespace on two replicas is one namespace; the
  last round and the seconds since it are each replica's own): one series per replica running
  now, label ``replica``.

Before a replica reports, a series has no samples (not a 0 that nothing measured).
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.metrics_core import Metric

from radixflow.cluster.routes import Routes
from radixflow.server.metrics import ServerMetrics

Sample = tuple[str, dict[str, str], float]  # name, labels, value: plain, picklable
Report = dict[str, list[Sample]]  # by family
PER_REPLICA = frozenset(
    {
        "radixflow_cache_namespaces",
        "radixflow_blocked_consumers_last_round",
        "radixflow_seconds_since_last_round",
    }
)
CUMULATIVE = frozenset({"counter", "histogram"})
# Serve replaces a replica that died, and retries one that fails to start without end once the
# deployment has run: until one is up, a job waits in Serve's queue with no word to anyone
NO_REPLICA = (
    "no replica is running: Ray Serve is starting replacements "
    "(one that fails to start is retried; Ray Serve's log says why it failed)"
)
log = logging.getLogger("radixflow.cluster")


def engine_samples(metrics: ServerMetrics) -> Report:
    """The engine series of ``metrics`` as plain samples by family (without ``_created``: a
    fleet's series have no single start). Pure."""
    return {
        family.name: [
            (s.name, dict(s.labels), s.value) for s in family.samples if not s.name.endswith("_created")
        ]
        for family in metrics.engine_families()
    }


class FleetFigures:
    """A Prometheus collector of the replicas' engine figures (thread-safe: the router's thread
    reports, ``/metrics`` collects); ``routes``: where the router sent each job in flight."""

    def __init__(self) -> None:
        self.routes = Routes()
        self._families = [(f.name, f.type, f.documentation) for f in ServerMetrics().engine_families()]
        self._lock = threading.Lock()
        self._latest: dict[str, Report] = {}  # by replica, every one that ever reported
        self._running: list[str] = []
        self._dead: frozenset[str] = frozenset()  # running replicas whose engine loop has failed
        self._ran = False  # a replica has run: none running now is a fleet down, not one starting
        self._stopping = False  # its user stops the fleet: replicas leaving is no failure
        self._watchers: list[Callable[[str], None]] = []

    def update(self, reports: Mapping[str, Report | None], dead: Iterable[str] = ()) -> None:
        """The replicas running now, each with what it last reported (None: nothing yet);
        ``dead``: those of them whose last report says their engine loop has failed. When the
        fleet goes down, says why in the log and to every watcher (on the caller's thread); when
        it serves again, says so in the log."""
        was = self.down()
        with self._lock:
            self._running = list(reports)
            self._ran = self._ran or bool(reports)
            self._dead = frozenset(dead) & set(reports)
            for replica, report in reports.items():
                if report is not None:
                    self._latest[replica] = report
        why = self.down()
        if self._stopping:  # the figures stay current; nobody is told of replicas going
            return
        if why is None and was is not None:  # the log said it went down: it says it came back
            serving = len(reports) - len(self._dead)
            # logged as a warning as that was (nothing configures logging in `serve`, where Python
            # shows warnings and above only), worded as news: the fleet's source, not a warning
            log.warning(
                "radixflow: the fleet serves again: %d replica%s running",
                serving,
                "" if serving == 1 else "s",
            )
        if why is not None and was is None:
            log.warning(
                "radixflow: warning: the fleet serves nothing: %s; requests get a 503 until a replica serves",
                why,
            )
            for watcher in list(self._watchers):
                watcher(why)

    def stop(self) -> None:
        """The fleet is being stopped (mutates self): Serve stopping its replicas next is neither
        logged as the fleet going down nor said to the watchers."""
        self._stopping = True

    def watch(self, watcher: Callable[[str], None]) -> None:
        """Call ``watcher`` with `down`'s reason each time the fleet goes down (mutates self)."""
        self._watchers.append(watcher)

    def running(self) -> int:
        """How many replicas run now (their engine loops alive or not), as Serve last said."""
        with self._lock:
            return len(self._running)

    def down(self) -> str | None:
        """Why the fleet serves nothing now: no replica is running, or every one running reports
        its engine loop dead or stuck (each answers only 503s, or nothing, until Ray Serve
        replaces it); None while one serves, or before Serve's first word on them."""
        with self._lock:
            running, dead, ran = self._running, self._dead, self._ran
        if not running:
            return NO_REPLICA if ran else None
        if len(dead) < len(running):
            return None
        every = f"the engine loop of every replica ({len(running)})"
        return f"{every} has failed or is stuck; Ray Serve is replacing them"

    def describe(self) -> Iterator[Metric]:
        for name, kind, doc in self._families:
            yield Metric(name, doc, kind)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            latest, running = dict(self._latest), list(self._running)
        for name, kind, doc in self._families:
            metric = Metric(name, doc, kind)
            if name in PER_REPLICA:
                _add_per_replica(metric, latest, name, running)
            else:
                _add_summed(metric, latest, name, kind, running)
            yield metric


def _add_per_replica(metric: Metric, latest: Mapping[str, Report], name: str, running: list[str]) -> None:
    """Family ``name``'s series of each running replica into ``metric``, labelled with the replica."""
    for replica in running:
        for sample, labels, value in latest.get(replica, {}).get(name, ()):
            metric.add_sample(sample, {**labels, "replica": replica}, value)


def _add_summed(
    metric: Metric, latest: Mapping[str, Report], name: str, kind: str, running: list[str]
) -> None:
    """Family ``name``'s series summed over the replicas into ``metric``: a cumulative family's
    over every replica that ever reported (so no sum goes backwards when one is replaced), any
    other's over the running ones."""
    summed = list(latest) if kind in CUMULATIVE else [r for r in running if r in latest]
    for (sample, labels), value in _sums([latest[r].get(name, []) for r in summed]).items():
        metric.add_sample(sample, dict(labels), value)


def _sums(reports: Sequence[Sequence[Sample]]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Each series summed over ``reports``, in the order first reported (histogram buckets stay
    in order). Pure."""
    total: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for samples in reports:
        for name, labels, value in samples:
            key = (name, tuple(labels.items()))
            total[key] = total.get(key, 0.0) + value
    return total


# Serve builds the request router itself, in this process, from JSON-only kwargs: the router
# finds the ingress's figures by the key it is given. Weak: a finished fleet leaves nothing here.
_PUBLISHED: weakref.WeakValueDictionary[str, FleetFigures] = weakref.WeakValueDictionary()


def publish(figures: FleetFigures) -> str:
    """A key under which `published` finds ``figures`` while they live (mutates the index)."""
    key = uuid.uuid4().hex
    _PUBLISHED[key] = figures
    return key


def published(key: str | None) -> FleetFigures | None:
    """The figures published under ``key`` (None: none, or a router in another process)."""
    return None if key is None else _PUBLISHED.get(key)
