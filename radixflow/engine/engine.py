"""The engine loop: schedule → run → update, the same for every runner."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace

from radixflow.cache.digest import CheckpointDigest
from radixflow.engine.arrivals import Arrivals
from radixflow.engine.events import EngineEvents
from radixflow.engine.interrupts import HeldInterrupt
from radixflow.engine.records import AbortResult, RoundRecord
from radixflow.engine.round_lock import between_rounds
from radixflow.engine.round_report import empty_round, round_record
from radixflow.engine.run_setup import make_cache, run_config
from radixflow.engine.runner import RoundResult, Runner, generation_room, result_problem
from radixflow.engine.submit_checks import (
    budget_problem,
    checked_id,
    fields_problem,
    is_count,
    refuse_submission,
)
from radixflow.problems import Problem
from radixflow.scheduler.admission import make_admission
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.placement import make_placement
from radixflow.scheduler.policy import make_policy
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.samples import FinishReason
from radixflow.scheduler.scheduler import Scheduler


@between_rounds  # from another thread, `step` and what changes requests wait for the round running
class Engine:
    def __init__(
        self,
        runner: Runner,
        config: SchedulerConfig,
        policy: str,
        placement: str | None,
        eviction: str,
        admission: str,
        round_history: int | None = None,
        events: EngineEvents | None = None,
    ) -> None:
        """No defaults of its own: ``policy``, ``placement``, ``eviction`` and ``admission`` (which
        wanted checkpoints may evict cached ones) come from the `EngineOptions` that declare them
        (`radixflow.options.build.new_engine`).
        ``round_history`` bounds the rounds kept in `rounds` (None: all, for benchmarks; a
        long-running server keeps a window and aggregates each returned record itself).
        ``events``: the observer of arrivals, rounds and scheduler decisions (None: nobody).
        ``placement``: where recurrent-state checkpoints go (None: the policy's own)."""
        config.validate()  # first: the cache is sized from it
        if round_history is not None and not is_count(round_history):
            # else deque's own words ("maxlen must be non-negative") name no parameter
            raise ValueError(f"round_history must be None or an integer >= 0, got {round_history!r}")
        self.runner = runner
        self.events = events
        model = runner.model
        config = run_config(config, model)
        self.cache = make_cache(config, model, eviction)
        scheduling = make_policy(policy)
        self.placement = (placement or scheduling.placement) if config.has_recurrent else "none"
        self.scheduler = Scheduler(
            config,
            self.cache,
            scheduling,
            make_placement(self.placement),
            predict=getattr(runner, "round_predictor", None),  # runners that predict nothing omit it
            events=events,
            admission=make_admission(admission),
        )
        self.now = 0.0
        self.rounds: deque[RoundRecord] = deque(maxlen=round_history)  # worker call succeeded
        self.failed_rounds: deque[RoundRecord] = deque(maxlen=round_history)  # rolled back
        self._by_id: dict[str, Request] = {}  # submission order; `forget` drops finished ones
        self._token_ids: dict[int, int] = {}
        self._arrivals = Arrivals()

    def submit(self, request: Request) -> None:
        """Accept a request; one that can never run is marked FAILED, the rest carry on.

        Raises `SubmitRefused` (a ValueError) for a request it cannot take at all (`refuse_submission`:
        no `Request`, an id that is no string or already in use, a request already submitted,
        scheduler state set by hand, an arrival time that is no finite number >= 0 or is past
        `MAX_ARRIVAL_S`).
        """
        refuse_submission(request, self._by_id)
        request.submitted = True
        self._by_id[request.id] = request
        problem = self.problem(request)
        if problem is not None:
            request.status, request.error = RequestStatus.FAILED, str(problem)
            if self.events is not None:  # its track: arrived, then finished with the refusal
                self.events.arrived(request)
                self.events.ended(request)
            return
        # One int object per distinct token id: a prompt then costs 8 bytes per token, not 36.
        request.prompt = tuple(map(self._token_ids.setdefault, request.prompt, request.prompt))
        # the request's own cost (tokenization, API) delays its admission; latency is still
        # measured from its arrival
        ready = request.arrival_s + self.runner.model.request_overhead_s
        self._arrivals.push(ready, request)

    def problem(self, request: Request) -> Problem | None:
        """Why ``request`` can never run here (the model refuses it, or it cannot fit an empty
        cache); None when it can. Pure: safe to call from another thread before submitting."""
        # the budget before the KV cap: built from options, the cap is what the budget holds, and
        # the budget is what the user gave
        return (
            fields_problem(request)
            or self.runner.validate(request)
            or budget_problem(request, self.scheduler.config, self.cache.ledger)
            or self.scheduler.config.unfit_reason(request)
        )

    def room(self, prompt_len: int) -> int:
        """The most tokens a prompt of ``prompt_len`` tokens may generate here (`generation_room`).
        Pure, as `problem` is."""
        return generation_room(prompt_len, self.runner.model, self.scheduler.config)

    @property
    def requests(self) -> list[Request]:
        """Every submitted request not forgotten, in submission order."""
        return list(self._by_id.values())

    def get(self, request_id: str) -> Request | None:
        return self._by_id.get(checked_id(request_id))

    def forget(self, request_id: str) -> None:
        """Drop a done request from the engine's records (a server does, once it has answered)."""
        req = self._by_id.get(checked_id(request_id))
        if req is not None and not req.status.done:
            raise ValueError(f"request {request_id!r} is still {req.status.value}")
        self._by_id.pop(request_id, None)

    def abort(self, request_id: str) -> AbortResult:
        """Cancel a request that has not finished: its locks, blocks and working slot are released.

        Between steps (from another thread it waits for the round running); status becomes ABORTED.
        """
        req = self._by_id.get(checked_id(request_id))
        if req is None:
            return AbortResult.UNKNOWN
        if req.status.done:
            return AbortResult.ALREADY_DONE
        if req.registration is None:  # not arrived yet: it is skipped when its arrival comes
            req.status = RequestStatus.ABORTED
        else:
            self.scheduler.abort(req)
        req.finish_s = max(self.now, req.arrival_s)  # one not arrived yet ends as it arrives
        self._ended(req)
        return AbortResult.ABORTED

    def stop(self, request_id: str) -> AbortResult:
        """End a request now, keeping what it generated (e.g. the caller saw a stop string).

        Between steps, as `abort`; status FINISHED with finish reason STOP, its sequence stays cached.
        Returns STOPPED (UNKNOWN, ALREADY_DONE as `abort`).
        """
        req = self._by_id.get(checked_id(request_id))
        if req is None:
            return AbortResult.UNKNOWN
        if req.status.done:
            return AbortResult.ALREADY_DONE
        if req.registration is None:  # not arrived yet: it ends as it arrives, with nothing
            finish_s = max(self.now, req.arrival_s)
            req.status, req.finish_reason, req.finish_s = RequestStatus.FINISHED, FinishReason.STOP, finish_s
        else:
            self.scheduler.finish(req, FinishReason.STOP, self.now)
        self._ended(req)
        return AbortResult.STOPPED

    def _ended(self, request: Request) -> None:
        """Tell the observer of a request ended between rounds: no round's finished list names it."""
        if self.events is not None:
            self.events.ended(request)

    def has_work(self) -> bool:
        return self._arrivals.next_ready() is not None or self.scheduler.has_work()

    def _admit_arrivals(self) -> None:
        next_ready = self._arrivals.next_ready()
        if not self.scheduler.has_work() and next_ready is not None:
            self.now = max(self.now, next_ready)  # idle: jump to the next admission
        for req in self._arrivals.pop_ready(self.now):
            self.scheduler.add(req)
            if self.events is not None:
                self.events.arrived(req)

    def step(self) -> RoundRecord | None:
        """One round: schedule → run → update. None when there is nothing left to do.

        A Ctrl-C is held (`HeldInterrupt`) but in the worker call: one while the round is
        scheduled, or up to the moment its worker call ends, rolls the round back (its requests
        failed); one while its results are taken, or the round is rolled back, lets that finish
        and the round stand. Then KeyboardInterrupt is raised."""
        with HeldInterrupt() as held:
            record = self._round(held)
        if held.came:
            raise KeyboardInterrupt
        return record

    def _round(self, held: HeldInterrupt) -> RoundRecord | None:
        out = self._schedule()
        if out is None:
            return None
        if not out.chunks:
            raise AssertionError(empty_round(out, self.scheduler))
        try:
            with held.let_through():  # a Ctrl-C held while scheduling is raised here
                result = self.runner.run(out)
        except Exception as e:
            return self._roll_back(out, f"worker call failed: {type(e).__name__}: {e}")
        except BaseException:  # Ctrl-C: leave the engine consistent, then stop
            self._roll_back(out, "interrupted")
            raise
        problem = result_problem(out, result)
        if problem is not None:  # as a raising call: the round rolled back, the engine whole
            return self._roll_back(out, f"worker call failed: runner {self.runner.name!r} {problem}")
        return self._update(out, result)

    def _schedule(self) -> SchedulerOutput | None:
        """The arrivals admitted and the next round scheduled; None when there is no work."""
        self._admit_arrivals()
        if not self.scheduler.has_work():
            return None
        return self.scheduler.schedule()

    def _update(self, out: SchedulerOutput, result: RoundResult) -> RoundRecord:
        """The round's results taken: the clock advanced, requests updated, the round recorded."""
        start = self.now
        self.now += result.duration_s
        finished = self.scheduler.update(out, result.samples, self.now, result.prompt_logprobs)
        record = replace(
            round_record(out, start, result.duration_s, result.worker_call_s),
            predicted_s=result.predicted_s,
            predicted_from=result.predicted_from,
            wall_s=result.wall_s,
        )
        self.rounds.append(record)
        if self.events is not None:
            self.events.round(record, out, [r.id for r in finished])
        return record

    def _roll_back(self, out: SchedulerOutput, reason: str) -> RoundRecord:
        failed = self.scheduler.rollback(out, reason)
        for req in failed:
            req.finish_s = self.now
        record = round_record(out, self.now, 0.0, 0.0, error=reason)
        self.failed_rounds.append(record)
        if self.events is not None:
            self.events.round(record, out, [r.id for r in failed])
        return record

    def run(
        self, requests: Iterable[Request], on_round: Callable[[RoundRecord], None] | None = None
    ) -> list[Request]:
        """Submit ``requests`` and step until every one has finished or failed."""
        for req in requests:
            self.submit(req)
        while self.has_work():
            record = self.step()
            if record is not None and on_round is not None:
                on_round(record)
        return self.requests

    def flush_events(self) -> None:
        """Have the event observer write out what it recorded (a trace file); no-op without one."""
        if self.events is not None:
            self.events.flush()

    def check_integrity(self) -> None:
        """Cache and scheduler invariants (call between steps)."""
        self.cache.check_integrity()
        self.scheduler.check_integrity()

    def next_event_s(self) -> float | None:
        """Modelled time of this engine's next round: now while it has admitted work, else its next
        admission; None when it has nothing to do. Pure (a fleet steps the earliest engine)."""
        if self.scheduler.has_work():
            return self.now
        earliest = self._arrivals.earliest()
        return None if earliest is None else max(self.now, earliest)

    def queue_length(self) -> int:
        """Requests submitted and not done: arriving, waiting or running. Pure."""
        return self._arrivals.waiting() + len(self.scheduler.waiting) + len(self.scheduler.running)

    def routing_digest(self) -> CheckpointDigest:
        """Where this engine can resume a prompt (READY checkpoints; every block of KV for a model
        with no recurrent layers), as a router compares replicas. Pure; call between steps."""
        return self.cache.ready_digest(kv_runs=not self.scheduler.config.has_recurrent)

    def dependency_depth(self) -> int:
        return max((r.depth for r in self.requests), default=0)
