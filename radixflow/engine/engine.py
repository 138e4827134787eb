"""The engine loop: schedule → run → update, the same for every runner."""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import MISSING, fields, replace

from radixflow.cache.digest import CheckpointDigest
from radixflow.cache.eviction import EntrySizes, make_eviction_policy
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.radix import RadixCache
from radixflow.engine.events import EngineEvents
from radixflow.engine.interrupts import HeldInterrupt
from radixflow.engine.records import AbortResult, RoundRecord, SubmitRefused
from radixflow.engine.runner import ModelInfo, RoundResult, Runner, generation_room
from radixflow.problems import Problem
from radixflow.scheduler.admission import make_admission
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.placement import make_placement
from radixflow.scheduler.policy import make_policy
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.sampling import FinishReason, SamplingParams
from radixflow.scheduler.scheduler import Scheduler, SchedulerConfig


def run_config(config: SchedulerConfig, model: ModelInfo) -> SchedulerConfig:
    """The scheduler config an engine over a runner of ``model`` runs with: what the model decides
    (recurrent state, whether a round restores state saved in it, end-of-sequence ids) taken from
    it, whatever ``config`` said. Pure; what a report of the run should record."""
    return replace(
        config,
        has_recurrent=model.has_recurrent,
        same_round_state=model.same_round_state and model.has_recurrent,
        eos_token_ids=model.eos_token_ids,
    )


def cache_budget(config: SchedulerConfig, model: ModelInfo) -> CacheBudget:
    """The cache's byte budget (``config.cache_memory``), its entries charged at the sizes the
    runner reports (the cost model's in the sim, the pools' tensors on the torch runner)."""
    unknown = model.kv_bytes_per_token < 1 or (model.has_recurrent and model.checkpoint_bytes < 1)
    if config.cache_memory is not None and unknown:
        raise ValueError(f"cache_memory needs entry sizes; runner model {model.name!r} reports none")
    return CacheBudget(
        block_bytes=max(model.kv_bytes_per_token, 1) * config.block_size,
        slot_bytes=max(model.checkpoint_bytes, 1),
        budget_bytes=config.cache_memory,
    )


def _fields_problem(request: Request) -> Problem | None:
    """Why ``request``'s prompt, namespace or sampling is of the wrong type (None: none is), found
    before anything reads them: a runner's checks read the prompt and the sampling, and a
    namespace that is no string would fail its admission mid-round (the fork history hashes it).
    Pure."""
    if not isinstance(request.prompt, tuple | list):  # a set's order is arbitrary, bytes are no ids
        return Problem("prompt", f"must be a list of token ids, got {type(request.prompt).__name__}")
    if not isinstance(request.namespace, str):
        return Problem("namespace", f"must be a string, got {request.namespace!r}")
    if not isinstance(request.sampling, SamplingParams):
        return Problem("sampling", f"must be a SamplingParams, got {request.sampling!r}")
    return None


def _checked_id(request_id: str) -> str:
    """``request_id`` as the engine's records are keyed by it; one that is no string (an
    unhashable one raised a bare TypeError out of the lookup) is refused naming it."""
    if not isinstance(request_id, str):
        raise ValueError(f"request_id must be a string, got {request_id!r}")
    return request_id


def _is_time(value: object) -> bool:
    """A finite number >= 0; a bool is no time though Python counts it an int (True was 1 s)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


def _is_count(value: object) -> bool:
    """An integer >= 0; a bool is none though Python counts it an int."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _scheduler_state(request: Request) -> str | None:
    """The first scheduler-owned field of ``request`` (those from ``status`` on) not at its
    default, as ``name=value`` (None: a fresh request). One set by hand (a working_slot, an
    output) was taken as the engine's own. Pure."""
    every = fields(Request)
    for f in every[[f.name for f in every].index("status") :]:
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        if getattr(request, f.name) != default:
            return f"{f.name}={getattr(request, f.name)!r}"
    return None


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
        if round_history is not None and not _is_count(round_history):
            # else deque's own words ("maxlen must be non-negative") name no parameter
            raise ValueError(f"round_history must be None or an integer >= 0, got {round_history!r}")
        self.runner = runner
        self.events = events
        model = runner.model
        config = run_config(config, model)
        sizes = EntrySizes(  # unknown sizes (0) count as one byte: tokens alone decide then
            max(model.kv_bytes_per_token, 1), max(model.checkpoint_bytes, 1), config.has_recurrent
        )
        self.cache = RadixCache(
            config.block_size,
            config.num_blocks,
            config.num_state_slots,
            make_eviction_policy(eviction, sizes),
            cache_budget(config, model),
        )
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
        self._submitted = 0
        self._token_ids: dict[int, int] = {}
        self._arrivals: list[tuple[float, int, Request]] = []

    def submit(self, request: Request) -> None:
        """Accept a request; one that can never run is marked FAILED, the rest carry on.

        Raises `SubmitRefused` (a ValueError) for an id that is no string (every queue and answer
        is keyed by it; an unhashable one raised a TypeError), a request object already
        submitted, an id already in use, scheduler-owned state set by hand (a working slot, an
        output), or an arrival time that is not a finite number >= 0 (a NaN one would never be
        admitted).
        """
        if not isinstance(request.id, str):
            raise SubmitRefused(f"request id must be a string, got {request.id!r}")
        if request.status is not RequestStatus.WAITING or request.registration is not None:
            raise SubmitRefused(f"request {request.id!r} was already submitted to an engine")
        if request.id in self._by_id:
            raise SubmitRefused(f"duplicate request id {request.id!r}")
        if (state := _scheduler_state(request)) is not None:
            raise SubmitRefused(f"request {request.id!r} carries scheduler state ({state})")
        if not _is_time(request.arrival_s):
            raise SubmitRefused(f"arrival_s must be a finite number >= 0, got {request.arrival_s!r}")
        self._by_id[request.id] = request
        self._submitted += 1
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
        heapq.heappush(self._arrivals, (ready, self._submitted, request))

    def problem(self, request: Request) -> Problem | None:
        """Why ``request`` can never run here (the model refuses it, or it cannot fit an empty
        cache); None when it can. Pure: safe to call from another thread before submitting."""
        # the budget before the KV cap: built from options, the cap is what the budget holds, and
        # the budget is what the user gave
        return (
            _fields_problem(request)
            or self.runner.validate(request)
            or self._budget_problem(request)
            or self.scheduler.config.unfit_reason(request)
        )

    def _budget_problem(self, request: Request) -> Problem | None:
        """Why ``request``'s KV and working state cannot fit the byte budget even alone. Pure."""
        config = self.scheduler.config
        blocks = config.blocks_needed(0, request.max_length)
        slots = 1 if config.has_recurrent and config.num_state_slots > 0 else 0
        if self.cache.within_budget(blocks, slots):
            return None
        param, prompt_blocks = "max_tokens", config.blocks_needed(0, len(request.prompt))
        if not self.cache.within_budget(prompt_blocks, slots):  # fewer tokens to generate would not help
            param, blocks = "prompt", prompt_blocks
        need = f"{blocks} KV blocks" + (" and a state slot" if slots else "")
        return Problem(param, f"does not fit in the cache_memory budget: it needs {need}")

    def room(self, prompt_len: int) -> int:
        """The most tokens a prompt of ``prompt_len`` tokens may generate here (`generation_room`).
        Pure, as `problem` is."""
        return generation_room(prompt_len, self.runner.model, self.scheduler.config)

    @property
    def requests(self) -> list[Request]:
        """Every submitted request not forgotten, in submission order."""
        return list(self._by_id.values())

    def get(self, request_id: str) -> Request | None:
        return self._by_id.get(_checked_id(request_id))

    def forget(self, request_id: str) -> None:
        """Drop a done request from the engine's records (a server does, once it has answered)."""
        req = self._by_id.get(_checked_id(request_id))
        if req is not None and not req.status.done:
            raise ValueError(f"request {request_id!r} is still {req.status.value}")
        self._by_id.pop(request_id, None)

    def abort(self, request_id: str) -> AbortResult:
        """Cancel a request that has not finished: its locks, blocks and working slot are released.

        Call between steps (the engine is single-threaded); status becomes ABORTED.
        """
        req = self._by_id.get(_checked_id(request_id))
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

        Between steps; status FINISHED with finish reason STOP, its sequence stays cached.
        Returns STOPPED (UNKNOWN, ALREADY_DONE as `abort`).
        """
        req = self._by_id.get(_checked_id(request_id))
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
        self._drop_aborted_arrivals()
        return bool(self._arrivals) or self.scheduler.has_work()

    def _drop_aborted_arrivals(self) -> None:
        while self._arrivals and self._arrivals[0][2].status is not RequestStatus.WAITING:
            heapq.heappop(self._arrivals)

    def _admit_arrivals(self) -> None:
        self._drop_aborted_arrivals()
        if not self.scheduler.has_work() and self._arrivals:
            self.now = max(self.now, self._arrivals[0][0])  # idle: jump to the next admission
        while self._arrivals and self._arrivals[0][0] <= self.now:
            req = heapq.heappop(self._arrivals)[2]
            if req.status is RequestStatus.WAITING:
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
            raise AssertionError(self._empty_round(out))
        try:
            with held.let_through():  # a Ctrl-C held while scheduling is raised here
                result = self.runner.run(out)
        except Exception as e:
            return self._roll_back(out, f"worker call failed: {type(e).__name__}: {e}")
        except BaseException:  # Ctrl-C: leave the engine consistent, then stop
            self._roll_back(out, "interrupted")
            raise
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
            self._record(out, start, result.duration_s, result.worker_call_s),
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
        record = self._record(out, self.now, 0.0, 0.0, error=reason)
        self.failed_rounds.append(record)
        if self.events is not None:
            self.events.round(record, out, [r.id for r in failed])
        return record

    def _record(
        self, out: SchedulerOutput, start: float, duration: float, worker: float, error: str | None = None
    ) -> RoundRecord:
        return RoundRecord(
            index=out.round_index,
            start_s=start,
            duration_s=duration,
            worker_call_s=worker,
            tokens=out.tokens,
            requests=len(out.chunks),
            bubble_tokens=out.bubble_tokens,
            blocked=len(out.blocked),
            stop_reason=out.stop_reason.value,
            chunks=tuple((c.request_id, c.start, c.end) for c in out.chunks),
            error=error,
        )

    def _empty_round(self, out: SchedulerOutput) -> str:
        """Why a round with work scheduled nothing: a scheduler bug, never a request's or an option's
        fault. A running request's next chunk always fits a fresh round (a decode step is one token,
        a prefill chunk one block, and the token budget holds a block); an idle engine holds no
        locks, private blocks or PENDING checkpoints, so the first waiting request starts, from a
        shallower point or from scratch if it must, for `problem` refused every request that could
        not fit an empty cache. Raised, not asserted: under -O `run` would loop forever. Pure."""
        waiting, running = self.scheduler.waiting, self.scheduler.running
        first = waiting.first()
        head = f" (first {first.id!r})" if first is not None else ""
        return (
            f"scheduler bug: round {out.round_index} scheduled no chunk with {len(waiting)} waiting{head} "
            f"and {len(running)} running requests, stop reason {out.stop_reason.value}"
        )

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
        waiting = [ready for ready, _, r in self._arrivals if r.status is RequestStatus.WAITING]
        return max(self.now, min(waiting)) if waiting else None

    def queue_length(self) -> int:
        """Requests submitted and not done: arriving, waiting or running. Pure."""
        arriving = sum(1 for _, _, r in self._arrivals if r.status is RequestStatus.WAITING)
        return arriving + len(self.scheduler.waiting) + len(self.scheduler.running)

    def routing_digest(self) -> CheckpointDigest:
        """Where this engine can resume a prompt (READY checkpoints; KV runs for a model with no
        recurrent layers), as a router compares replicas. Pure; call between steps."""
        return self.cache.ready_digest(kv_runs=not self.scheduler.config.has_recurrent)

    def dependency_depth(self) -> int:
        return max((r.depth for r in self.requests), default=0)
