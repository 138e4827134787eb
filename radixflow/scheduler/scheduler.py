"""Round scheduler: builds each round (`RoundBuilder`, round_builder.py), then applies its
results: sampled tokens, READY checkpoints, finished, aborted and failed requests.

The cost of a round does not grow with the queue: the scan stops when the budgets run out, removal
from the queue is O(1), blocked consumers are parked rather than re-matched, and the cache evicts
from queues.
"""

from __future__ import annotations

from radixflow.cache.radix import RadixCache
from radixflow.scheduler.admission import CheckpointAdmission
from radixflow.scheduler.checkpoints import CheckpointPlanner
from radixflow.scheduler.chunk_writer import ChunkWriter
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.events import SchedulerEvents
from radixflow.scheduler.holdings_check import check_holdings
from radixflow.scheduler.output import SchedulerOutput, round_problem
from radixflow.scheduler.parking import ParkingLot
from radixflow.scheduler.placement import CheckpointPlacement
from radixflow.scheduler.policy import SchedulingPolicy
from radixflow.scheduler.queue import WaitingQueue
from radixflow.scheduler.request import Request, RequestStatus
from radixflow.scheduler.reuse import ReuseFinder
from radixflow.scheduler.round_builder import RoundBuilder
from radixflow.scheduler.samples import FinishReason, PromptLogprobs, Sample
from radixflow.scheduler.scan import PolicyContext, RoundPredictor
from radixflow.scheduler.token_sequences import ends_the_output


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
        self.last_round: SchedulerOutput | None = None  # what check_integrity checks of a round
        self.writer = ChunkWriter(cache, config, self.checkpoints)
        self.builder = RoundBuilder(
            config, cache, policy, self.reuse, self.checkpoints, self.writer,
            self.waiting, self.running, self.parked, events,
        )  # fmt: skip
        policy.bind(PolicyContext(config, cache, self.reuse, self.running, predict, self.note))

    # ----------------------------------------------------------------- queue
    def add(self, request: Request) -> None:
        """Queue an arrived request and record its prompt as a known sequence (ValueError for an
        id already waiting, changing nothing)."""
        if request in self.waiting:
            raise ValueError(f"request {request.id!r} is already waiting")
        request.registration = self.cache.register(request.namespace, request.prompt)
        self.waiting.append(request)
        self.policy.on_arrival(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ----------------------------------------------------------------- schedule
    def schedule(self) -> SchedulerOutput:
        """Pick this round's chunks (`RoundBuilder.build`; mutates requests, locks, reservations)."""
        out = self.builder.build(self.rounds)
        self.rounds += 1
        self.last_round = out
        return out

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
            self.writer.kept(req, req.tail_position, req.tail_slot)
            self.cache.adopt_checkpoint(req.namespace, req.sequence, req.tail_position, req.tail_slot)
            req.tail_slot = None
        if req.working_slot is not None and not req.prefilled and req.computed > req.reused:
            self.writer.kept(req, req.computed, req.working_slot)
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
        """Between rounds: queues disjoint, each request's status its queue's, nobody parked, the
        last round's chunks saving and restoring slots soundly (`round_problem`), the promised-KV
        count exact, and every lock, private block and working slot the cache holds a running
        request's (`check_holdings`: a request ended part way through its release leaks them)."""
        running = list(self.running.values())
        assert not any(r in self.waiting for r in running), "a request is both waiting and running"
        assert all(r.status is RequestStatus.RUNNING for r in running), "a non-running request runs"
        assert all(r.status is RequestStatus.WAITING for r in self.waiting), "a non-waiting request waits"
        assert not self.parked, "a consumer is still parked after its round"
        problem = None if self.last_round is None else round_problem(self.last_round.chunks)
        assert problem is None, problem
        self.writer.check(running)
        check_holdings(self.cache, running, self.waiting)
