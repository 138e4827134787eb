"""Simulated runner: the real scheduler and cache, with a cost model instead of a forward pass."""

from __future__ import annotations

import hashlib

from radixflow.costmodel.hardware import HARDWARE, HardwareProfile
from radixflow.costmodel.kinds import ChunkShape, ModelShape
from radixflow.costmodel.model import CostModel
from radixflow.costmodel.shapes import DEFAULT_SIM_MODEL, SIM_MODELS
from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.problems import Problem
from radixflow.scheduler.output import ScheduledChunk, SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.sampling import Sample

# The cost model lives in radixflow.costmodel (no torch); these names are re-exported for callers.
__all__ = [
    "DEFAULT_SIM_MODEL",
    "HARDWARE",
    "SIM_MODELS",
    "CostModel",
    "HardwareProfile",
    "SimRunner",
    "sim_token",
]


def chunk_shape(chunk: ScheduledChunk) -> ChunkShape:
    return ChunkShape(
        start=chunk.start,
        length=chunk.length,
        sample=chunk.sample,
        restores=chunk.restore_slot is not None,
        snapshots=len(chunk.snapshots),
    )


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
        self.cost = CostModel(spec, hardware)
        self.model = ModelInfo(spec.name, spec.has_recurrent, spec.vocab_size, spec.max_context)

    def validate(self, request: Request) -> Problem | None:
        if request.sampling.prompt_logprobs is not None:
            return Problem("prompt_logprobs", "the sim runner computes no logits: they need the torch runner")
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        seconds = self.cost.round_seconds(chunk_shape(c) for c in batch.chunks)
        samples = {
            c.request_id: Sample(sim_token(c.namespace, c.tokens, self.spec.vocab_size), 0.0)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=seconds, worker_call_s=seconds)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None  # the sim token is a function of the prompt alone: nothing to compare
