"""Round scheduler: running chunks first, then a scan of the waiting queue under budgets.

The scan's behaviour at a blocked consumer is the policy's; everything else (budgets, chunked
prefill, cache reservations, checkpoint placement) is shared by every policy. The cost of a round
does not grow with the queue: the scan stops when the budgets run out, removal from the queue is
O(1), blocked consumers are parked rather than re-matched, and the cache evicts from queues.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from radixflow.cache.radix import RadixCache
from radixflow.cache.types import Match
from radixflow.scheduler.admission import CheckpointAdmission
from radixflow.scheduler.bubble import ScanStop, bubble_tokens
from radixflow.scheduler.checkpoints import CheckpointPlanner
from radixflow.scheduler.chunk_writer import ChunkWriter
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.events import SchedulerEvents
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, StopReason
from radixflow.scheduler.parking import ParkingLot
from radixflow.scheduler.placement import CheckpointPlacement
from radixflow.scheduler.policy import ScanAction, SchedulingPolicy
from radixflow.scheduler.queue import WaitingQueue
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.reuse import ReuseFinder, ReusePoint
from radixflow.scheduler.sampling import FinishReason, PromptLogprobs, Sample
from radixflow.scheduler.scan import PolicyContext, RoundPredictor
from radixflow.scheduler.token_sequences import ends_the_output


class _Admit(Enum):
    SCHEDULED = "scheduled"
    BLOCKED = "blocked"
    NO_BUDGET = "no_budget"
    NO_MEMORY = "no_memory"
    SKIPPED = "skipped"  # the policy left it waiting and goes on
    DECLINED = "declined"  # the policy ended the round before it


@dataclass
class _Budget:
    tokens: int
    requests: int


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        cache: RadixCache,
        policy: SchedulingPolicy,
        placement: CheckpointPlacement,
        predict: RoundPredictor | None = None,
        events: SchedulerEvents | None = None,
        admission: CheckpointAdmission | None = None,
    ) -> None:
        """``predict``: the seconds a round of these chunks would take (the runner's model; None
        where it has none), lent to the policy with the rest of `PolicyContext`.
        ``events``: who is told of parked and woken consumers and policy decisions (None: nobody).
        ``admission``: which wanted checkpoints may evict cached ones (None: every one)."""
        config.validate()
        self.events = events
        self.config = config
        self.predict = predict
        self.cache = cache
        self.policy = policy
        self.placement = placement
        self.reuse = ReuseFinder(cache, config.block_size, config.has_recurrent)
        self.checkpoints = CheckpointPlanner(cache, placement, config, admission)
        self.waiting = WaitingQueue()  # arrival order; parked consumers stay in place
        self.running: dict[str, Request] = {}  # admission order
        self.parked = ParkingLot()
        self.rounds = 0
        self.writer = ChunkWriter(cache, config, self.checkpoints)
        policy.bind(PolicyContext(config, cache, self.reuse, self.running, predict, self.note))

    # ----------------------------------------------------------------- queue
    def add(self, request: Request) -> None:
        """Queue an arrived request and record its prompt as a known sequence."""
        request.registration = self.cache.register(request.namespace, request.prompt)
        self.waiting.append(request)
        self.policy.on_arrival(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ----------------------------------------------------------------- schedule
    def schedule(self) -> SchedulerOutput:
        """Pick this round's chunks (mutates requests, cache locks and reservations)."""
        out = SchedulerOutput(round_index=self.rounds)
        budget = _Budget(self.config.token_budget, self.config.max_requests)
        if self._continue_running(budget, out):
            stop = self._scan(budget, out)
        else:
            stop = ScanStop(None, None, iter(self.policy.order(self.waiting)))
        self.rounds += 1
        if stop is not None and budget.tokens > 0 and budget.requests > 0:
            slots = self.config.max_requests
            out.bubble_tokens = bubble_tokens(stop, self.reuse, self.parked, budget.tokens, slots)
        return out

    def _continue_running(self, budget: _Budget, out: SchedulerOutput) -> bool:
        """Next chunk of every running request, decode steps first; False when the budget ran out."""
        decoding = [r for r in self.running.values() if r.prefilled]
        prefilling = [r for r in self.running.values() if not r.prefilled]
        for req in decoding + prefilling:
            chunk = self._continue(req, budget) if budget.requests > 0 else None
            if chunk is None:
                out.stop_reason = StopReason.TOKEN_BUDGET
                return False
            out.chunks.append(chunk)
        return True

    def _scan(self, budget: _Budget, out: SchedulerOutput) -> ScanStop | None:
        """Admit waiting requests in the policy's order; None when every one was considered."""
        scan = iter(self.policy.order(self.waiting))
        for req in scan:
            if budget.requests == 0:
                out.stop_reason = StopReason.REQUEST_BUDGET
                return ScanStop(req, None, scan)
            status, match = self._admit(req, budget, out)
            if status is _Admit.BLOCKED:
                action = self.policy.on_blocked(req, match, out)
                if action is ScanAction.RECOMPUTE:
                    status = self._recompute(req, match, budget, out)
                elif action is ScanAction.FOLLOW:
                    status = self._follow(req, match, budget, out)
                else:
                    self._park(req, match, out)
                if action is ScanAction.STOP:
                    out.stop_reason = StopReason.BLOCKED
                    return ScanStop(None, None, scan)
            if status is _Admit.SCHEDULED:
                self.policy.on_scheduled(req)
            elif status is _Admit.DECLINED:
                out.stop_reason = StopReason.POLICY
                return ScanStop(req, match, scan)
            elif status not in (_Admit.SCHEDULED, _Admit.SKIPPED, _Admit.BLOCKED):
                no_budget = status is _Admit.NO_BUDGET
                out.stop_reason = StopReason.TOKEN_BUDGET if no_budget else StopReason.MEMORY
                return ScanStop(req, match, scan)
        return None

    def _park(self, req: Request, match: Match, out: SchedulerOutput) -> None:
        """``req`` waits for ``match``'s producer until the round ends (mutates the lot)."""
        out.blocked.append(req.id)
        assert match.producer is not None
        self.parked.park(req, match.producer)
        if self.events is not None:
            self.events.parked(req.id, match.producer)

    def _recompute(self, req: Request, match: Match, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Start a blocked consumer from the deepest READY point above its PENDING one: it
        recomputes the prefix rather than wait for the producer (mutates as `_start` does)."""
        status = self._start_shallower(req, match.checkpoint_tokens, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status

    def _follow(self, req: Request, match: Match, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Start a blocked consumer from its PENDING checkpoint: the producer's chunk in this
        round saves the state before the runner's later wave restores it (mutates as `_start`)."""
        if not self.config.same_round_state:
            raise ValueError(f"policy {self.policy.name!r} follows a producer on a runner that cannot")
        point = self.reuse.pending_point(match)
        status = self._start(req, point, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status

    def _admit(self, req: Request, budget: _Budget, out: SchedulerOutput) -> tuple[_Admit, Match]:
        match = self.reuse.match(req)
        point = self.reuse.point(req, match)
        if point is None:
            return _Admit.BLOCKED, match
        verdict = self.policy.on_ready(req, match, point.tokens, out)
        if verdict is not None:
            return (_Admit.SKIPPED if verdict is ScanAction.SKIP else _Admit.DECLINED), match
        status = self._start(req, point, budget, out)
        if status is _Admit.NO_MEMORY and point.tokens and self.config.has_recurrent and not self.running:
            # Nothing running will free capacity, so waiting cannot help. Our own lock on the reuse
            # point pins the checkpoints above it; a shallower start frees them for a working slot.
            status = self._start_shallower(req, point.tokens, budget, out)
        if status is _Admit.SCHEDULED:
            self.checkpoints.observe(req, match)
        return status, match

    def _start_shallower(self, req: Request, below: int, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """`_start` from the deepest READY point shallower than ``below`` prompt tokens that can
        get its capacity (NO_MEMORY when none can)."""
        status = _Admit.NO_MEMORY
        for point in self.reuse.shallower(req, below):
            status = self._start(req, point, budget, out)
            if status is not _Admit.NO_MEMORY:
                break
        return status

    def _start(self, req: Request, point: ReusePoint, budget: _Budget, out: SchedulerOutput) -> _Admit:
        """Lock ``point``, reserve the request's capacity and emit its first chunk."""
        end = self.config.chunk_end(point.tokens, len(req.prompt), budget.tokens)
        if end is None:
            return _Admit.NO_BUDGET
        self.cache.lock(point.handle)  # protect the reuse point from our own reservations
        carries_state = end < len(req.prompt) or req.sampling.max_tokens > 1
        working = 1 if self.config.has_recurrent and carries_state else 0
        # Admit only when the whole prompt's KV fits beside what running requests still need,
        # so a running request can always finish (no deadlock, no preemption needed).
        if not self.writer.reserve(req, point, working):
            self.cache.unlock(point.handle)
            return _Admit.NO_MEMORY
        self.writer.start(req, point)  # first: its KV joins the promise checkpoints must leave room for
        ckpts = self.checkpoints.positions(req, point.tokens, end, held=working)
        if working:
            req.working_slot = self.cache.alloc_working_slot()
        req.status = RequestStatus.RUNNING
        self.waiting.remove(req)
        self.running[req.id] = req
        out.chunks.append(self._emit(req, end, ckpts, point.restore_slot, budget))
        return _Admit.SCHEDULED

    def _continue(self, req: Request, budget: _Budget) -> ScheduledChunk | None:
        """The next prefill chunk, or the decode step that feeds the token sampled last round."""
        decoding = req.prefilled
        target = req.computed + 1 if decoding else len(req.prompt)
        end = self.config.chunk_end(req.computed, target, budget.tokens)
        if end is None:
            return None
        ckpts = [] if decoding else self.checkpoints.positions(req, req.computed, end)
        return self._emit(req, end, ckpts, req.working_slot, budget)

    def _emit(
        self, req: Request, end: int, ckpts: list[int], restore: int | None, budget: _Budget
    ) -> ScheduledChunk:
        """The writer's chunk for ``req`` up to ``end``, charged to the round's budget."""
        chunk = self.writer.emit(req, end, ckpts, restore)
        budget.tokens -= chunk.end - chunk.start
        budget.requests -= 1
        return chunk

    # ----------------------------------------------------------------- update
    def update(
        self,
        out: SchedulerOutput,
        samples: dict[str, Sample],
        now: float,
        prompt_logprobs: dict[str, PromptLogprobs] | None = None,
    ) -> list[Request]:
        """Apply a finished round: checkpoints become READY (waking their parked consumers),
        sampled tokens are appended, finished requests release their resources.

        Returns the requests that finished this round.
        """
        finished: list[Request] = []
        woken: list[Request] = []
        for chunk in out.chunks:
            req = self.running[chunk.request_id]
            self.cache.commit(req.id)
            woken += self._wake(req.id)
            req.chunks += 1
            if prompt_logprobs and req.id in prompt_logprobs:
                req.prompt_logprobs.extend(prompt_logprobs[req.id])
            reason = self._accept(req, samples[req.id], now) if chunk.sample else None
            if reason is None and chunk.end == len(req.prompt) and req.sampling.max_tokens == 0:
                reason = FinishReason.LENGTH  # prompt logprobs only: nothing to generate
            if reason is not None:
                self.finish(req, reason, now)
                finished.append(req)
        self.policy.on_round_end(woken, now)
        return finished

    def _accept(self, req: Request, sample: Sample, now: float) -> FinishReason | None:
        """Append a sampled token; why the request ends with it (None: it goes on)."""
        if not req.output:
            req.depth = req.depth_base + self.config.rounds_for(len(req.prompt) - req.reused)
            req.first_token_s = now
        req.output.append(sample.token)
        req.output_logprobs.append(sample)
        params = req.sampling
        eos = sample.token in self.config.eos_token_ids and not params.ignore_eos
        if sample.token in params.stop_token_ids or eos:
            req.stopped_by_token = True
            return FinishReason.STOP
        choices = params.open_choices
        if choices is not None and ends_the_output(choices, req.output):
            return FinishReason.STOP
        return FinishReason.LENGTH if len(req.output) >= params.max_tokens else None

    def finish(self, req: Request, reason: FinishReason, now: float) -> None:
        """End a request with what it has (mutates it; its sequence stays cached in the tree).

        Call from `update` or between rounds (a stop string found by the caller).
        """
        self._leave_queue(req)
        self._keep_states(req)
        req.finish_reason, req.finish_s, req.status = reason, now, RequestStatus.FINISHED
        self._release(req)

    def _keep_states(self, req: Request) -> None:
        """What a request ended between rounds computed stays reusable as READY checkpoints, on
        block boundaries whose KV is published: a decoded conversation's tail (the next turn
        resumes there, whether it ended or its client stopped reading), and a prompt's state where
        its chunked prefill stopped (the same prompt sent again resumes there). Mutates the cache
        and ``req``; a failed round's states are never kept (`rollback`)."""
        if req.tail_slot is not None:
            self.cache.adopt_checkpoint(req.namespace, req.sequence, req.tail_position, req.tail_slot)
            req.tail_slot = None
        if req.working_slot is not None and not req.prefilled and req.computed > req.reused:
            self.cache.adopt_checkpoint(req.namespace, req.prompt, req.computed, req.working_slot)
            req.working_slot = None

    def _leave_queue(self, req: Request) -> None:
        """``req`` leaves the waiting queue unadmitted, if it waits there (mutates the queue; the
        policy is told, so it stops counting it)."""
        if req in self.waiting:
            self.waiting.remove(req)
            self.policy.on_left(req)

    def _release(self, req: Request) -> None:
        """Give back everything ``req`` holds (`ChunkWriter.release`); it leaves the running set."""
        self.writer.release(req, running=self.running.pop(req.id, None) is not None)

    def abort(self, req: Request) -> None:
        """Cancel a waiting or running request between rounds (mutates queues, frees its resources).

        Checkpoints it already produced were committed by `update` and stay: they hold valid state;
        so do its decoded tail and its state where a chunked prefill stopped (`_keep_states`).
        """
        self._leave_queue(req)
        self._keep_states(req)
        self._release(req)
        req.status = RequestStatus.ABORTED

    def rollback(self, out: SchedulerOutput, reason: str) -> list[Request]:
        """The round's worker call failed: withdraw what it published and fail its requests.

        Nothing the round published becomes READY: its PENDING checkpoints and the KV it added to
        the tree are withdrawn, and the consumers parked on them wake to re-match next round (the
        first one admitted becomes the producer). Returns the failed requests.
        """
        failed = [self.running[c.request_id] for c in out.chunks]
        for req in failed:  # unlock every path first: withdrawn nodes must be unlocked
            self.cache.unlock(req.lock)
            req.lock = None
        self.cache.withdraw([r.id for r in failed])
        woken: list[Request] = []
        for req in failed:
            woken += self._wake(req.id)
            self._release(req)
            req.status, req.error = RequestStatus.FAILED, reason
        self.policy.on_round_end(woken, None)
        return failed

    def _wake(self, producer: str) -> list[Request]:
        woken = self.parked.wake(producer)
        if self.events is not None:
            for consumer in woken:
                self.events.woken(consumer.id, producer)
        return woken

    def note(self, kind: str, request_id: str, **details: object) -> None:
        """Report a policy decision about ``request_id`` this round to the event observer, if any
        (see `radixflow.scheduler.events`). Pure for the schedule."""
        if self.events is not None:
            self.events.decision(kind, request_id, **details)

    def check_integrity(self) -> None:
        """Between rounds: queues disjoint, nobody parked, the promised-KV count exact."""
        running = list(self.running.values())
        assert not any(r in self.waiting for r in running), "a request is both waiting and running"
        assert all(r.status is RequestStatus.RUNNING for r in running), "a non-running request runs"
        assert all(r.status is RequestStatus.WAITING for r in self.waiting), "a non-waiting request waits"
        assert not self.parked, "a consumer is still parked after its round"
        self.writer.check(running)
