"""Which recurrent-state saves a chunk carries: placed checkpoints and the request's own state."""

from __future__ import annotations

from radixflow.cache.radix import RadixCache
from radixflow.cache.types import Match
from radixflow.scheduler.admission import AdmissionContext, AdmitAll, CheckpointAdmission
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.forks import ForkHistory
from radixflow.scheduler.output import SnapshotSpec
from radixflow.scheduler.placement import CheckpointPlacement, PlacementContext, shared_resume
from radixflow.scheduler.request import Request


class CheckpointPlanner:
    def __init__(
        self,
        cache: RadixCache,
        placement: CheckpointPlacement,
        config: SchedulerConfig,
        admission: CheckpointAdmission | None = None,
    ) -> None:
        self.cache = cache
        self.placement = placement
        self.config = config
        self.admission = admission or AdmitAll()
        self.forks = ForkHistory()

    def observe(self, req: Request, match: Match) -> None:
        """``req`` was admitted with this match: remember where it forked from cached content
        (mutates the fork history a placement may predict from)."""
        if self.config.has_recurrent:
            self.forks.observe(req.namespace, len(req.prompt), match.kv_tokens)

    def positions(self, req: Request, start: int, end: int, held: int = 0) -> list[int]:
        """Where the prefill chunk ``[start, end)`` checkpoints, as far as state slots allow.

        Checkpoints are an optimisation: as many as free slots allow, and evictable ones for the
        saves admission deems worth it, earliest first; ``held`` slots are already spoken for (a
        working slot not yet allocated). May evict READY checkpoints.
        """
        if not self.config.has_recurrent:
            return []
        assert req.registration is not None
        reg = req.registration
        ctx = PlacementContext(
            prompt_len=len(req.prompt),
            start=start,
            end=end,
            block_size=self.config.block_size,
            branch_points=lambda lo, hi: self.cache.branch_points(reg, lo, hi),
            predicted_fork=lambda: self.forks.predict(req.namespace, len(req.prompt), self.config.block_size),
            shared=lambda: self.cache.sharing(reg).tokens,
        )
        wanted = self.placement.positions(ctx)
        if wanted and self.cache.free_slots < len(wanted) + held:
            # short of slots: a save where a checkpoint is cached already takes none (`extend`
            # keeps that one), so it must not count, nor evict another (a copy resuming below the
            # end of a block-aligned prompt recomputes up to the end checkpoint cached for it)
            cached = self._cached(req.namespace, req.prompt, wanted)
            wanted = [p for p in wanted if p not in cached]
        if not wanted or self.cache.free_slots >= len(wanted) + held:
            return wanted
        resumed = req.reused if req.computed else start  # a first chunk starts where it resumed
        keen = self.admission.may_evict(
            AdmissionContext(
                wanted,
                lambda: [*ctx.branch_points(start, end), shared_resume(ctx)],
                ctx.predicted_fork,
                ctx.prompt_len // ctx.block_size * ctx.block_size,
                resumed,
            )
        )
        return self._fit(wanted, keen, held)

    def _cached(self, namespace: str, tokens: tuple[int, ...], positions: list[int]) -> set[int]:
        """The ``positions`` that hold a checkpoint (of any readiness) on ``tokens``' path
        already. Pure: a walk per position, only while slots are short."""
        match = self.cache.match
        return {p for p in positions if match(namespace, tokens, p, touch=False).checkpoint_tokens == p}

    def _fit(self, wanted: list[int], keen: list[int], held: int) -> list[int]:
        """``keen`` positions in evictable slots, then the rest of ``wanted`` in free ones,
        earliest first (may evict READY checkpoints for ``keen``)."""
        free = max(self.cache.free_slots_upto(len(keen) + held) - held, 0)
        if len(keen) == len(wanted):
            return wanted[:free]
        chosen = set(keen[:free])
        spare = max(self.cache.free_slots - held - len(chosen), 0)
        chosen.update([p for p in wanted if p not in chosen][:spare])
        return sorted(chosen)

    def own_snapshots(self, req: Request, end: int) -> list[SnapshotSpec]:
        """The request's own state saves at ``end``: its working slot while it goes on, and the
        rolling tail slot of a decode step on a block boundary, on a model with recurrent state (may
        allocate the tail slot)."""
        snaps = []
        goes_on = end < len(req.prompt) or len(req.output) + 1 < req.sampling.max_tokens
        if req.working_slot is not None and goes_on:
            snaps.append(SnapshotSpec(end, req.working_slot, own=True))
        if self.config.has_recurrent and req.prefilled and end % self.config.block_size == 0:
            # Decoding past a block boundary: keep that state, so the finished conversation ends in
            # a checkpoint a follow-up turn can reuse (best effort, one rolling slot per request).
            # A full-attention model has none: KV alone resumes there, and a slot would only take
            # bytes of the budget, pinned under the next turn's lock.
            if req.tail_slot is None and self._tail_slot_free(req, end):
                req.tail_slot = self.cache.alloc_working_slot()
            if req.tail_slot is not None:
                snaps.append(SnapshotSpec(end, req.tail_slot, own=True))  # adopted only as it ends
                req.tail_position = end
        return snaps

    def _tail_slot_free(self, req: Request, end: int) -> bool:
        """Whether a slot is free for ``req``'s rolling tail save at ``end``, evicting a READY
        checkpoint for it only where admission deems that save worth it and none is kept at
        ``end`` already."""
        if self.cache.free_slots:
            return True
        if self._cached(req.namespace, req.sequence, [end]):
            return False  # kept there already: the slot would be freed as the request ends
        ctx = AdmissionContext([end], lambda: [], lambda: None, end, req.reused)
        return bool(self.admission.may_evict(ctx)) and self.cache.free_slots_upto(1) > 0
