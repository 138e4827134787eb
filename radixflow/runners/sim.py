"""Simulated runner: the real scheduler and cache, with a cost model instead of a forward pass."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from radixflow.costmodel.hardware.profiles import HARDWARE, HardwareProfile
from radixflow.costmodel.round_cost.by_profile import RoundCostModel, round_cost_model
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.model_shape import ModelShape
from radixflow.costmodel.shape.sim_catalogue import DEFAULT_SIM_MODEL, SIM_MODELS
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.problems import Problem
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput, waves
from radixflow.scheduler.request import Request
from radixflow.scheduler.samples import Sample
from radixflow.scheduler.scan import RoundPredictor

# The cost model lives in radixflow.costmodel (no torch); these names are re-exported for callers.
__all__ = [
    "DEFAULT_SIM_MODEL",
    "HARDWARE",
    "SIM_MODELS",
    "HardwareProfile",
    "SimRunner",
    "sim_token",
]


def chunk_shapes(chunks: Sequence[ScheduledChunk]) -> list[ChunkShape]:
    """The round's chunks as the cost model sees them, each in its wave (`output.waves`)."""
    return [chunk_shape(c, w) for c, w in zip(chunks, waves(chunks), strict=True)]


def chunk_shape(chunk: ScheduledChunk, wave: int = 0) -> ChunkShape:
    return ChunkShape(
        start=chunk.start,
        length=chunk.length,
        sample=chunk.sample,
        restores=chunk.restore_slot is not None,
        snapshots=len(chunk.snapshots),
        head_rows=prompt_logit_rows(chunk),
        wave=wave,
    )


def prompt_logit_rows(chunk: ScheduledChunk) -> int:
    """Prompt positions whose logits the chunk computes for prompt logprobs: the logprob of each
    reported position ``p`` in ``[prompt_logprobs_from, end)`` (``p >= 1``) reads the logits at
    ``p - 1``, cached positions included (see runners.prompt_logprobs)."""
    if chunk.prompt_logprobs_from is None:
        return 0
    return max(0, chunk.end - max(chunk.prompt_logprobs_from, 1))


def sim_token(namespace: str, prompt: tuple[int, ...], vocab_size: int) -> int:
    """The 'generated' token: a deterministic hash of namespace and the sequence so far.

    The sim's sample is this token with logprob 0 (probability 1): there are no logits.
    """
    digest = hashlib.sha256(f"{namespace}|{','.join(map(str, prompt))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % vocab_size


class SimRunner:
    name = "sim"

    def __init__(self, spec: ModelShape, hardware: HardwareProfile) -> None:
        self.spec = spec
        self.cost: RoundCostModel = round_cost_model(spec, hardware)
        self.model = ModelInfo(
            spec.name,
            spec.has_recurrent,
            spec.vocab_size,
            spec.max_context,
            request_overhead_s=hardware.request_overhead_s,
            same_round_state=True,  # a round's cost is priced per wave (`ChunkShape.wave`)
            kv_bytes_per_token=spec.cache_bytes_per_token(hardware.weight_bytes),
            checkpoint_bytes=spec.state_bytes(),
        )

    def validate(self, request: Request) -> Problem | None:
        # no logits, so no logprob to report: its sample's logprob 0 is no answer to ``logprobs``
        # (it returned 0 and no alternatives, whatever k asked for)
        for param in ("prompt_logprobs", "logprobs"):
            if getattr(request.sampling, param) is not None:
                return Problem(param, "the sim runner computes no logits: they need the torch runner")
        return validate_prompt(request, self.model)

    @property
    def round_predictor(self) -> RoundPredictor:
        return self.predict_round

    def predict_round(self, chunks: Sequence[ScheduledChunk]) -> float:
        """The time a round of ``chunks`` takes: exactly what `run` charges for them. Pure."""
        return self.cost.round_seconds(chunk_shapes(chunks))

    def run(self, batch: SchedulerOutput) -> RoundResult:
        cost = self.cost.breakdown(chunk_shapes(batch.chunks))
        samples = {
            c.request_id: Sample(sim_token(c.namespace, c.tokens, self.spec.vocab_size), 0.0)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=cost.seconds, worker_call_s=cost.worker_call_s)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None  # the sim token is a function of the prompt alone: nothing to compare
