"""Run several scheduling policies on the identical workload, one after another, in one process."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Protocol

from radixflow.bench.metrics import PolicyResult, predictor_error, summarize
from radixflow.bench.provenance import Provenance
from radixflow.bench.spread import Load, rotated
from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.engine.runner import Runner
from radixflow.scheduler.policy import default_placement, policy_counters
from radixflow.scheduler.request import Request
from radixflow.scheduler.scheduler import SchedulerConfig


@dataclass
class PolicyRun:
    result: PolicyResult
    rounds: list[RoundRecord]
    requests: list[Request]
    # the policy's own decision counts (`SchedulingPolicy.counters`: adaptive's waits, recomputes...)
    counters: dict[str, int] = field(default_factory=dict)
    # cache entries evicted, by kind (`EntryKind` values: KV leaves, checkpoints)
    evictions: dict[str, int] = field(default_factory=dict)
    # rounds whose worker call failed and were rolled back (their requests failed): not in ``rounds``
    rolled_back: list[RoundRecord] = field(default_factory=list)
    # every trial's own run, in trial order (this run holds the first's rounds and requests, and
    # medians of the timings); empty: this run alone
    repeats: list[PolicyRun] = field(default_factory=list)

    def trial_runs(self) -> list[PolicyRun]:
        """Every trial's own run, in trial order (this one when not repeated)."""
        return self.repeats or [self]

    def trials(self) -> list[list[RoundRecord]]:
        """Every trial's rounds, in trial order (one trial when not repeated)."""
        return [t.rounds for t in self.trial_runs()]

    def every_round(self) -> list[RoundRecord]:
        """The rounds this run ran, rolled-back ones included, in the order it ran them."""
        return sorted([*self.rounds, *self.rolled_back], key=lambda r: r.index)


@dataclass
class BenchReport:
    workload: dict[str, object]
    config: dict[str, object]
    runs: list[PolicyRun] = field(default_factory=list)
    # a run cut short (a Ctrl-C): the trials it did not finish, each {"policy", "trial"} (from 1),
    # in the order they were to run; None: every trial finished
    unfinished: list[dict[str, object]] | None = None
    # the machine's load over the run: what competed for it while the timings were taken (a
    # measurement, not a setting: two runs of one config differ here); None: not read
    load: Load | None = None
    # a run cut short by an error, not a Ctrl-C: the error, in one line (None: no error cut it)
    error: str | None = None
    # what produced the figures: the command, the code, the machine; None: not recorded
    run: Provenance | None = None

    def to_json(self) -> dict[str, object]:
        cut = {} if self.unfinished is None else {"interrupted": True, "unfinished": self.unfinished}
        if self.error is not None:
            cut["error"] = self.error
        return {
            **cut,
            **({} if self.run is None else {"run": self.run.to_json()}),
            "workload": self.workload,
            "config": self.config,
            "load_1min": None if self.load is None else self.load.to_json(),
            "results": [_result_json(run) for run in self.runs],
        }


# the timings a repeated run shows the median of (`medians`), each trial's kept in the JSON
TIMINGS = (
    "mean_latency_s",
    "p50_latency_s",
    "p99_latency_s",
    "makespan_s",
    "worker_call_s",
    "wall_mean_latency_s",
    "wall_worker_call_s",
)


def _result_json(run: PolicyRun) -> dict[str, object]:
    """The run's figures, and every trial's `TIMINGS` in trial order (``trial_timings``): with
    ``--repeat``, the spread its medians are read against."""
    trials = [{k: getattr(t.result, k) for k in TIMINGS} for t in run.trial_runs()]
    return {**run.result.to_dict(), "trial_timings": trials}


@dataclass
class Trials:
    """Each policy's trials as they finish, so a run cut short keeps the ones it finished."""

    policies: list[str]
    repeats: int = 1
    done: dict[str, list[PolicyRun]] = field(default_factory=dict)

    def add(self, policy: str, run: PolicyRun) -> None:
        self.done.setdefault(policy, []).append(run)

    def count(self, policy: str) -> int:
        return len(self.done.get(policy, []))

    def runs(self) -> list[PolicyRun]:
        """One run per policy with a finished trial, in policy order, its timings medians over
        the trials it finished (`_median_run`)."""
        return [_median_run(self.done[p]) for p in self.policies if self.count(p)]

    def unfinished(self) -> list[dict[str, object]]:
        """The trials not finished, {"policy", "trial"} (from 1), in the order they run."""
        return [
            {"policy": p, "trial": t}
            for t in range(1, self.repeats + 1)
            for p in self.policies
            if self.count(p) < t
        ]


def fresh_copy(requests: list[Request]) -> list[Request]:
    """The same user requests with no scheduler state, so every policy starts equal."""
    return [Request(r.id, r.prompt, r.namespace, r.arrival_s, sampling=r.sampling) for r in requests]


class Engines(Protocol):
    """Where the harness gets its engines: `radixflow.options.EngineSetup` (the one builder)."""

    @property
    def runner(self) -> Runner: ...

    @property
    def scheduler(self) -> SchedulerConfig: ...

    def engine(
        self,
        policy: str | None = None,
        placement: str | None = None,
        round_history: int | None = None,
        label: str | None = None,
    ) -> Engine: ...


def run_policies(
    requests: list[Request],
    engines: Engines,
    policies: list[str],
    placement: str | None,
    on_round: Callable[[str, RoundRecord, Engine], None] | None = None,
    repeats: int = 1,
    trials: Trials | None = None,
    on_reference: Callable[[], None] | None = None,
) -> list[PolicyRun]:
    """Each policy ``repeats`` times, interleaved, each first in turn (`rotated`), each on a fresh
    engine from ``engines``; timings are reported as medians over repeats. ``placement`` None:
    each policy's own. With a trace, each engine is a process of it named after its policy run.
    ``trials``: where each finished trial goes as it ends (what a run cut short keeps), empty as
    given. ``on_reference``: called as each request's no-cache reference is done, before any
    policy runs (`reference_tokens`)."""
    scheduler = engines.scheduler
    reference = reference_tokens(engines.runner, requests, on_reference)
    trials = Trials(policies, repeats) if trials is None else trials
    for repeat in range(repeats):
        for policy in rotated(policies, repeat):  # each first in turn: drift falls on each alike
            ran = _placement(placement, policy, engines.runner.model.has_recurrent)
            label = _label(policy, ran, repeats, trials.count(policy))
            engine = engines.engine(policy, placement, label=label)
            callback = None if on_round is None else (lambda rec, p=policy, e=engine: on_round(p, rec, e))
            engine.run(fresh_copy(requests), on_round=callback)
            result = summarize(policy, engine, scheduler, reference)
            counters = policy_counters(engine.scheduler.policy)
            evicted = engine.cache.evictions()
            rounds, failed = list(engine.rounds), list(engine.failed_rounds)
            trials.add(policy, PolicyRun(result, rounds, engine.requests, counters, evicted, failed))
    return trials.runs()


def reference_tokens(
    runner: Runner, requests: list[Request], on_request: Callable[[], None] | None = None
) -> dict[str, int] | None:
    """The runner's no-cache token of each request, asked one request at a time with
    ``on_request`` called after each: on a real model it is a full prefill each, long enough
    that a progress bar standing at 0% looks hung. None: the runner has no reference."""
    tokens: dict[str, int] = {}
    for request in requests:
        got = runner.reference_tokens([request])
        if got is None:
            return None
        tokens.update(got)
        if on_request is not None:
            on_request()
    return tokens


def _placement(given: str | None, policy: str, recurrent: bool) -> str:
    """The checkpoint placement ``policy``'s engine runs: none on a model without recurrent state
    (its engines place nothing, as ``--json``'s config says), else the one given or its own."""
    return (given or default_placement(policy)) if recurrent else "none"


def _label(policy: str, placement: str, repeats: int, trial: int) -> str:
    label = f"{policy} · {placement}"
    return label if repeats == 1 else f"{label} #{trial + 1}"


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The first row, each figure that is a float in some row and a float or undefined (None) in
    every other replaced by its median over the rows that define it (the timings of repeated
    runs: a trial that completed nothing has no latency, and the first trial's None, or its value
    alone, would stand for trials that had one); counts and hashes the first's."""
    return {k: _median_of(k, v, rows) for k, v in rows[0].items()}


def _median_of(key: str, first: Any, rows: list[dict[str, Any]]) -> Any:
    values = [r[key] for r in rows]
    floats = [v for v in values if isinstance(v, float)]
    timed = floats and all(v is None or isinstance(v, float) for v in values)
    return statistics.median(floats) if timed else first


def _median_run(trials: list[PolicyRun]) -> PolicyRun:
    """`medians` of the results; the predictor's error over every trial's rounds (the first
    trials hold the runner's first rounds, which it leaves out); agreement the worst trial's and
    the completed and failed requests those of the trial that failed most (exactness and
    completeness are not timings: the first trial's, or a median, would hide a trial that
    disagreed or failed); the outputs' digest where every trial's is one (`_outputs`); the first
    trial's rounds, requests and other counts; every trial's own run kept."""
    first = trials[0].result
    timed = medians([{f.name: getattr(t.result, f.name) for f in fields(first)} for t in trials])
    kept = trials[0]
    predictor = predictor_error([r for t in trials for r in t.rounds])
    agreements = [t.result.agreement for t in trials]
    agreement = None if None in agreements else min(agreements)  # type: ignore[type-var]
    worst = max((t.result for t in trials), key=lambda r: r.failed)  # the first on a tie
    counts = {"completed": worst.completed, "failed": worst.failed, "failures": worst.failures}
    exact = {**_outputs(trials), "predictor": predictor, "agreement": agreement}
    return PolicyRun(
        replace(first, **{**timed, **counts, **exact}),
        kept.rounds,
        kept.requests,
        kept.counters,
        kept.evictions,
        kept.rolled_back,
        trials,
    )


def _outputs(trials: list[PolicyRun]) -> dict[str, Any]:
    """The trials' one outputs digest; or, where they differ, none and each trial's (the first
    trial's alone would hide a trial whose outputs differed)."""
    shas = [t.result.outputs_sha256 for t in trials]
    if len(set(shas)) == 1:
        return {"outputs_sha256": shas[0], "trial_outputs_sha256": None}
    return {"outputs_sha256": None, "trial_outputs_sha256": tuple(shas)}


def config_dict(scheduler: SchedulerConfig, **extra: object) -> dict[str, object]:
    return {**asdict(scheduler), **extra}
