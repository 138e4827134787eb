"""Round time of a worker call from the work it does per layer kind and a hardware profile.

    round_s = round_overhead + layer_overhead · layers + per_request · sequences
              + max(Σ_term FLOPs_term · s/FLOP_term,  bytes / bandwidth)

FLOPs are split by cost term. ``matmul``: every weight matmul of every layer kind (attention,
Gated DeltaNet, Mamba2 and short-conv projections, the dense MLP or the active experts of an
MoE), which run at one GEMM rate on any hardware. The sequence mixing of each kind has its own
term, since its kernels differ: ``attention`` (QK^T and PV over the cached and new context; it
grows with the prefix a chunk reads), ``gdn`` (delta-rule recurrence and its short conv),
``mamba2`` (SSD scan and conv), ``conv`` (LFM2's short conv). ``lm_head``: the output projection,
at sampled positions only (prefill needs logits at the last position alone). Bytes are
every weight once per call, the KV each chunk reads in each attention layer, and the recurrent
state restored from or saved to checkpoint slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from radixflow.costmodel.hardware import COMPUTE_TERMS, HardwareProfile
from radixflow.costmodel.kinds import ChunkShape, ModelShape

OVERHEAD_TERMS = ("round", "layer", "sequence")


@dataclass(frozen=True)
class RoundWork:
    counts: dict[str, float]  # overhead terms: round (1), layer (layers), sequence (chunks)
    flops: dict[str, float]  # compute term -> FLOPs this round
    bytes: float  # weights + KV reads + state copies

    def features(self) -> list[float]:
        """Regressors of a linear fit, in `feature_names()` order."""
        return [self.counts[t] for t in OVERHEAD_TERMS] + [self.flops[t] for t in COMPUTE_TERMS]


def feature_names() -> list[str]:
    return list(OVERHEAD_TERMS) + list(COMPUTE_TERMS)


def round_work(shape: ModelShape, chunks: Iterable[ChunkShape], dtype_bytes: int = 2) -> RoundWork:
    """FLOPs and bytes of one worker call computing ``chunks`` on a model of ``shape``."""
    chunks = list(chunks)
    tokens = sum(c.length for c in chunks)
    flops = dict.fromkeys(COMPUTE_TERMS, 0.0)
    for layer in shape.layers:
        for mixer in layer.mixers:
            flops["matmul"] += 2.0 * mixer.params(shape.hidden) * tokens
            flops[mixer.kind] += sum(mixer.mix_flops(c) for c in chunks)
        if layer.mlp is not None:
            flops["matmul"] += 2.0 * layer.mlp.active_params(shape.hidden) * tokens
    sampled = sum(c.sample for c in chunks)
    flops["lm_head"] = 2.0 * shape.hidden * shape.vocab_size * sampled
    kv = shape.kv_bytes_per_token(dtype_bytes) * sum(c.end for c in chunks)
    copies = sum(int(c.restores) + c.snapshots for c in chunks)
    weights = shape.total_params() * dtype_bytes
    counts = {"round": 1.0, "layer": float(len(shape.layers)), "sequence": float(len(chunks))}
    return RoundWork(counts, flops, float(weights + kv + copies * shape.state_bytes()))


@dataclass(frozen=True)
class RoundCost:
    overhead_s: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return self.overhead_s + max(self.compute_s, self.memory_s)


@dataclass(frozen=True)
class CostModel:
    shape: ModelShape
    hardware: HardwareProfile

    def cost(self, chunks: Iterable[ChunkShape]) -> RoundCost:
        hw = self.hardware
        work = round_work(self.shape, chunks, hw.weight_bytes)
        overhead = (
            hw.round_overhead_s
            + hw.layer_overhead_s * work.counts["layer"]
            + hw.per_request_s * work.counts["sequence"]
        )
        compute = sum(work.flops[t] * hw.seconds_per_flop(t) for t in COMPUTE_TERMS)
        memory = work.bytes / hw.bandwidth if hw.bandwidth else 0.0
        return RoundCost(overhead, compute, memory)

    def round_seconds(self, chunks: Iterable[ChunkShape]) -> float:
        return self.cost(chunks).seconds
