"""Simulated runner: the real scheduler and cache, with a cost model instead of a forward pass."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from radixflow.engine.runner import ModelInfo, RoundResult, validate_prompt
from radixflow.scheduler.output import SchedulerOutput
from radixflow.scheduler.request import Request
from radixflow.scheduler.sampling import Sample

ATTENTION = "attention"
RECURRENT_KINDS = frozenset({"gdn", "mamba2", "conv"})


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a model for costing: layer kinds in order, hidden size, parameter count."""

    name: str
    layers: tuple[str, ...]  # each "attention", "gdn", "mamba2" or "conv"
    hidden: int
    params: float  # active parameters per token
    vocab_size: int = 151_936
    max_context: int = 262_144

    @property
    def has_recurrent(self) -> bool:
        return any(kind in RECURRENT_KINDS for kind in self.layers)

    @property
    def attention_layers(self) -> int:
        return sum(kind == ATTENTION for kind in self.layers)


def _pattern(recurrent: str, attention_every: int, n: int) -> tuple[str, ...]:
    return tuple(ATTENTION if (i + 1) % attention_every == 0 else recurrent for i in range(n))


# Shapes follow the public configs of these families (active parameters for MoE models).
SIM_MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec("qwen3_5-2b", _pattern("gdn", 4, 24), 2048, 2.0e9),
        ModelSpec("qwen3_5-35b-a3b", _pattern("gdn", 4, 40), 2048, 3.0e9),
        ModelSpec("qwen3_next-80b-a3b", _pattern("gdn", 4, 48), 2048, 3.0e9),
        ModelSpec("lfm2-1.2b", _pattern("conv", 3, 16), 2048, 1.2e9, vocab_size=65_536),
        ModelSpec("nemotron_h-8b", _pattern("mamba2", 8, 52), 4096, 8.0e9, vocab_size=131_072),
        ModelSpec("falcon_h1-1.5b", _pattern("mamba2", 1, 24), 2048, 1.5e9, vocab_size=65_536),
        ModelSpec("qwen3-4b", (ATTENTION,) * 36, 2560, 4.0e9),
    )
}
DEFAULT_SIM_MODEL = "qwen3_5-2b"


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    flops: float  # sustained dense FLOP/s for prefill matmuls
    bandwidth: float  # memory bytes/s: every round streams all weights once
    round_overhead_s: float  # launch + scheduling cost of one worker call
    per_request_s: float  # per-sequence cost (metadata, state restore/snapshot copies)


HARDWARE: dict[str, HardwareProfile] = {
    h.name: h
    for h in (
        HardwareProfile("h100", 4.0e14, 3.35e12, 4e-3, 2e-4),
        HardwareProfile("h200", 4.4e14, 4.8e12, 4e-3, 2e-4),
        HardwareProfile("cpu", 1.0e11, 2.0e10, 2e-3, 1e-3),
    )
}


@dataclass(frozen=True)
class CostModel:
    """Roofline round time: overhead + per-request costs + max(compute, weight streaming).

    Compute is 2·params FLOPs per token plus attention over each token's context; a round also
    reads every weight once (bf16), which bounds small rounds from below.
    """

    model: ModelSpec
    hardware: HardwareProfile

    def round_seconds(self, batch: SchedulerOutput) -> float:
        flops = 0.0
        for c in batch.chunks:
            flops += 2.0 * self.model.params * c.length
            # each new token attends to every earlier token, in every attention layer
            ctx = c.length * (c.start + c.end) / 2
            flops += 4.0 * self.model.hidden * ctx * self.model.attention_layers
        h = self.hardware
        weights_s = 2.0 * self.model.params / h.bandwidth
        return h.round_overhead_s + h.per_request_s * len(batch.chunks) + max(flops / h.flops, weights_s)


def sim_token(namespace: str, prompt: tuple[int, ...], vocab_size: int) -> int:
    """The 'generated' token: a deterministic hash of namespace and the sequence so far.

    The sim's sample is this token with logprob 0 (probability 1): there are no logits.
    """
    digest = hashlib.sha256(f"{namespace}|{','.join(map(str, prompt))}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % vocab_size


class SimRunner:
    name = "sim"

    def __init__(self, spec: ModelSpec, hardware: HardwareProfile) -> None:
        self.spec = spec
        self.cost = CostModel(spec, hardware)
        self.model = ModelInfo(spec.name, spec.has_recurrent, spec.vocab_size, spec.max_context)

    def validate(self, request: Request) -> str | None:
        if request.sampling.prompt_logprobs is not None:
            return "the sim runner computes no logits: prompt logprobs need the torch runner"
        return validate_prompt(request, self.model)

    def run(self, batch: SchedulerOutput) -> RoundResult:
        seconds = self.cost.round_seconds(batch)
        samples = {
            c.request_id: Sample(sim_token(c.namespace, c.tokens, self.spec.vocab_size), 0.0)
            for c in batch.chunks
            if c.sample
        }
        return RoundResult(samples=samples, duration_s=seconds, worker_call_s=seconds)

    def reference_tokens(self, requests: list[Request]) -> dict[str, int] | None:
        return None  # the sim token is a function of the prompt alone: nothing to compare
