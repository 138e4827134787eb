"""Prometheus metrics of one server: rounds, bubbles, reuse, queues, blocked consumers, latency.

Each server has its own registry (no global state: two servers in one process, as in the tests,
do not mix their figures). The engine thread updates them; ``/metrics`` renders them.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from radixflow.engine.records import RoundRecord
from radixflow.scheduler.request import Request, RequestStatus

_ERROR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
THROUGHPUT_WINDOW_S = 10.0
NOT_ACCEPTING = "not_accepting"  # draining, or the engine failed
REJECTIONS = ("queue_full", NOT_ACCEPTING)  # why a request is refused before admission
# the outcome of an engine request answered with a 4xx: the engine would not take it (an id in
# use, a check the handler missed), the caller's mistake and no failure of the server's
REFUSED = "refused"
PREFIX = "radixflow_"


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # declared in this order: /metrics lists the series as they were registered
        self._declare_rounds()
        self._declare_tokens()
        self._declare_queues()
        self._declare_cache()
        self._declare_requests()
        self._declare_timing()
        # what only an engine counts (a fleet's ingress has none: `engine_from` takes them over);
        # generated tokens too: an ingress sees none of a request answered with an error
        self.engine = (
            self.generation_tokens,
            self.rounds,
            self.failed_rounds,
            self.round_tokens,
            self.bubble_tokens,
            self.blocked,
            self.blocked_now,
            self.waiting,
            self.running,
            self.namespaces,
            self.cache_bytes,
            self.cache_budget,
            self.cache_promised,
            self.evictions,
            self.tokens_per_s,
            self.prediction_error,
            self.since_last_round,
        )
        self._window: deque[tuple[float, int]] = deque()  # (time, tokens) of recent rounds
        self._lock = threading.Lock()  # the window is read by /metrics, written by the engine thread
        self._prompt_sum = self._reused_sum = 0

    def _counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(PREFIX + name, doc, labels, registry=self.registry)

    def _gauge(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(PREFIX + name, doc, labels, registry=self.registry)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(PREFIX + name, doc, buckets=buckets, registry=self.registry)

    def _declare_rounds(self) -> None:
        self.rounds = self._counter("rounds", "worker rounds run")
        self.failed_rounds = self._counter("failed_rounds", "rounds whose worker call failed")
        self.round_tokens = self._counter("round_tokens", "tokens computed in rounds (prefill + decode)")
        self.bubble_tokens = self._counter("bubble_tokens", "token budget left unused while work waited")
        self.blocked = self._counter("blocked_consumers", "consumers left waiting on a pending checkpoint")
        self.blocked_now = self._gauge("blocked_consumers_last_round", "blocked consumers in the last round")

    def _declare_tokens(self) -> None:
        self.prompt_tokens = self._counter("prompt_tokens", "prompt tokens of finished requests")
        self.reused_tokens = self._counter("reused_prompt_tokens", "prompt tokens served from the cache")
        self.generation_tokens = self._counter(
            "generation_tokens", "tokens generated (by aborted and failed requests too)"
        )
        self.reuse_rate = self._gauge("reuse_rate", "reused / prompt tokens of finished requests")

    def _declare_queues(self) -> None:
        self.waiting = self._gauge("requests_waiting", "requests in the engine's waiting queue")
        self.running = self._gauge("requests_running", "requests admitted to rounds (prefill or decode)")
        self.pending = self._gauge(
            "requests_pending", "accepted requests not yet answered (the bounded queue)"
        )
        self.tokenizing = self._gauge(
            "requests_tokenizing",
            "prompts past the queue check still being tokenized; --max-pending is checked against "
            "these and requests_pending together",
        )

    def _declare_cache(self) -> None:
        self.namespaces = self._gauge(
            "cache_namespaces", "cache namespaces (cache_salt values) holding cached KV or a queued prompt"
        )
        self.cache_bytes = self._gauge(
            "cache_bytes",
            "cache memory in use, by kind: kv (KV blocks), checkpoint (recurrent-state checkpoints), "
            "working (running requests' own recurrent state)",
            ("kind",),
        )
        self.cache_budget = self._gauge(
            "cache_budget_bytes",
            "the cache's memory budget (cache_memory; without one, what its KV and state capacities hold)",
        )
        self.cache_promised = self._gauge(
            "cache_promised_bytes",
            "KV bytes running requests will still allocate, held against the budget beside cache_bytes "
            "(new requests wait while the two fill it)",
        )
        self.evictions = self._counter(
            "cache_evictions",
            "cache entries evicted, by kind: kv (KV leaves), checkpoint (checkpoints, those lost with "
            "their KV included)",
            ("kind",),
        )
        self._evicted: dict[str, int] = {}  # the cache's eviction totals when last published

    def _declare_requests(self) -> None:
        self.requests = self._counter("requests", "requests answered, by outcome", ("outcome",))
        self.rejected = self._counter("requests_rejected", "requests refused before admission", ("reason",))
        # every series from the start: one born with its first event hides it from rate()
        for outcome in (*(s.value for s in RequestStatus if s.done), REFUSED):
            self.requests.labels(outcome)
        for reason in REJECTIONS:
            self.rejected.labels(reason)

    def _declare_timing(self) -> None:
        self.ttft = self._histogram(
            "time_to_first_token_seconds", "wall time from arrival to first token", _LATENCY_BUCKETS
        )
        self.latency = self._histogram(
            "e2e_request_latency_seconds", "wall time from arrival to the last token", _LATENCY_BUCKETS
        )
        self.tokens_per_s = self._gauge(
            "tokens_per_second", f"tokens computed per second over the last {THROUGHPUT_WINDOW_S:g} s"
        )
        self.prediction_error = self._histogram(
            "round_prediction_relative_error",
            "|predicted - measured| / measured worker call of each round the runner predicted",
            _ERROR_BUCKETS,
        )
        self.since_last_round = self._gauge(
            "seconds_since_last_round",
            "seconds since the engine last finished a round (since it started, before the first); "
            "grows while it is idle too: alert on it with requests_pending > 0",
        )
        self._last_round = time.monotonic()  # written by the engine thread, read by /metrics
        self.since_last_round.set_function(lambda: time.monotonic() - self._last_round)

    def on_round(self, record: RoundRecord) -> None:
        self._last_round = time.monotonic()  # a failed round finished too: the loop moved on
        if record.error is not None:
            self.failed_rounds.inc()
            return
        self.rounds.inc()
        self.round_tokens.inc(record.tokens)
        self.bubble_tokens.inc(record.bubble_tokens)
        self.blocked.inc(record.blocked)
        self.blocked_now.set(record.blocked)
        measured = record.worker_call_s
        if record.predicted_s is not None and measured > 0:
            self.prediction_error.observe(abs(record.predicted_s - measured) / measured)
        now = time.monotonic()
        with self._lock:
            self._window.append((now, record.tokens))
        self.update_throughput(now)

    def update_throughput(self, now: float) -> None:
        with self._lock:
            while self._window and self._window[0][0] < now - THROUGHPUT_WINDOW_S:
                self._window.popleft()
            self.tokens_per_s.set(sum(t for _, t in self._window) / THROUGHPUT_WINDOW_S)

    def on_queues(self, waiting: int, running: int) -> None:
        """The engine's queues, as it left them after a round or a command."""
        self.waiting.set(waiting)
        self.running.set(running)

    def on_pending(self, pending: int) -> None:
        """Accepted requests not yet answered: the bounded queue a 429 is decided on (set as it
        changes, by whichever thread changes it, under the lock that guards the count)."""
        self.pending.set(pending)

    def on_tokenizing(self, prompts: int) -> None:
        """Prompts (each choice one) of requests still being tokenized: ``prompts`` now."""
        self.tokenizing.set(prompts)

    def on_cache(
        self,
        namespaces: int,
        budget: int,
        in_use: Mapping[str, int],
        evictions: Mapping[str, int],
        promised: int = 0,
    ) -> None:
        """The engine's cache now holds ``namespaces`` namespaces (one per live cache salt) and
        ``in_use`` bytes by kind of its ``budget``, beside ``promised`` bytes of KV its running
        requests will still allocate; ``evictions``: its entries evicted so far, by kind (totals:
        counted here as the increase since the last call)."""
        self.namespaces.set(namespaces)
        self.cache_budget.set(budget)
        self.cache_promised.set(promised)
        for kind, used in in_use.items():
            self.cache_bytes.labels(kind).set(used)
        for kind, total in evictions.items():
            self.evictions.labels(kind).inc(total - self._evicted.get(kind, 0))
            self._evicted[kind] = total

    def on_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def on_done(self, request: Request, seconds: float, error: int | None = None) -> None:
        """A request left the engine (finished, failed or aborted) after ``seconds`` of wall time:
        its generated tokens count whatever the outcome; its prompt, reuse and latency only when
        it finished. ``error``: the status of the error it was answered with, whatever its own
        (the drain aborted it in the engine): a 4xx is `REFUSED`, any other failed; one the
        engine never ended (still waiting or running) failed with the engine loop itself."""
        self.requests.labels(_outcome(request, error)).inc()
        self.generation_tokens.inc(len(request.output))  # generated, whatever became of them
        if error is not None or request.status is not RequestStatus.FINISHED:
            return
        self.latency.observe(seconds)
        self.prompt_tokens.inc(len(request.prompt))
        self.reused_tokens.inc(request.reused)
        self._prompt_sum += len(request.prompt)
        self._reused_sum += request.reused
        self.reuse_rate.set(self._reused_sum / self._prompt_sum if self._prompt_sum else 0.0)

    def on_rejected(self, reason: str) -> None:
        """A request refused before admission; ``reason`` is one of `REJECTIONS`."""
        self.rejected.labels(reason).inc()

    def engine_families(self) -> list[Metric]:
        """The engine's series as they are now (names, types, help and samples)."""
        return [family for metric in self.engine for family in metric.collect()]

    def engine_from(self, collector: Collector) -> None:
        """Render the engine's series from ``collector`` (a fleet's: its replicas' figures) instead
        of these, which nothing here would update (mutates the registry)."""
        for metric in self.engine:
            self.registry.unregister(metric)
        self.registry.register(collector)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The figures and their content type, in the format ``accept`` (a scraper's Accept
        header) asks for: OpenMetrics where it lists it, Prometheus' text format otherwise."""
        self.update_throughput(time.monotonic())
        encode, content_type = choose_encoder(_readable(accept or ""))
        return encode(self.registry), content_type


_OPENMETRICS_VERSIONS = ("1.0.0", "2.0.0")


def _readable(accept: str) -> str:
    """``accept`` with each entry's version as `choose_encoder` takes it (see `_version`): the
    OpenMetrics versions prometheus_client writes (2.0.0 is 1.0.0 but for native histograms)."""
    return ",".join(_readable_entry(entry.split(";")) for entry in accept.split(","))


def _readable_entry(parts: list[str]) -> str:
    media, versions = parts[0], [p for p in parts[1:] if p.partition("=")[0].strip() == "version"]
    version = _version(media.strip(), versions[0].partition("=")[2]) if versions else None
    kept = [p for p in parts if p not in versions]
    return ";".join([*kept, f"version={version}"] if version else kept)


def _version(media: str, asked: str) -> str | None:
    """``asked`` unquoted (HTTP allows ``"1.0.0"``); None unless dotted numbers (``1.x`` was a
    TypeError: a 500); 1.0.0 for an OpenMetrics one past 1.0.0 not written here (9.9.9 was echoed)."""
    if not re.fullmatch(r"\d+(\.\d+)*", version := asked.strip().strip('"')):
        return None
    past = tuple(map(int, version.split("."))) > (1, 0, 0)
    if media == "application/openmetrics-text" and past and version not in _OPENMETRICS_VERSIONS:
        return "1.0.0"
    return version


def _outcome(request: Request, error: int | None) -> str:
    """The outcome label of a request that left the engine (see `ServerMetrics.on_done`)."""
    if error is not None and 400 <= error < 500:
        return REFUSED
    if error is not None or not request.status.done:
        return RequestStatus.FAILED.value
    return request.status.value
