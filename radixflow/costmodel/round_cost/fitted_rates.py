"""Round time of a worker call from the work it does per layer kind and fitted per-term rates.

This is how a profile without ``kernels`` is costed (the CPU profile, profiles fitted by
`radixflow calibrate`; a profile with ``kernels`` is costed kernel by kernel,
`costmodel.round_cost.kernel_sum`):

    round_s = fixed per call + per layer · decoder layers + per sequence · sequences
              + per token pair · tokens² + per cached KV element · KV elements read
              + max(Σ_term FLOPs_term · s/FLOP_term,  bytes / bandwidth)

The fixed part and the token pairs are the same for either way of costing
(`costmodel.round_cost.breakdown.fixed_terms`); the cached KV read is a fitted CPU figure
(`PREFIX_KV_TERM`), left out of a profile with kernels.
FLOPs are split by cost term. ``matmul``: every weight matmul of every layer kind (attention,
Gated DeltaNet, Mamba2 and short-conv projections, the dense MLP or the active experts of an
MoE), which run at one GEMM rate on any hardware. The sequence mixing of each kind has its own
term, since its kernels differ: ``attention`` (QK^T and PV of a chunk's new tokens over each other,
causally), ``prefix_attention`` (the same over the cached prefix the chunk reads: gathered KV, no
mask, another rate per FLOP; a profile without its own figure prices it as ``attention``),
``gdn`` (delta-rule recurrence and its short conv), ``mamba2`` (SSD scan and conv), ``conv``
(LFM2's short conv). ``lm_head``: the output projection,
at sampled positions and at the prompt positions of prompt-logprob requests. Bytes are the weights
once per call (of an MoE, the experts the round's tokens touch; the output head where the call
computes logits; of the embedding table, the rows its tokens look up), the KV each chunk reads in each
attention layer, and the recurrent state restored from or saved to checkpoint slots.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from radixflow.costmodel.hardware.profile_checks import COMPUTE_TERMS
from radixflow.costmodel.hardware.profiles import HardwareProfile
from radixflow.costmodel.kernel_times.contract import TermCost
from radixflow.costmodel.round_cost.breakdown import RoundBreakdown, charge_scheduler, fixed_terms, source
from radixflow.costmodel.shape.chunk import ChunkShape
from radixflow.costmodel.shape.model_shape import ModelShape

OVERHEAD_TERMS = ("round", "layer", "sequence")


@dataclass(frozen=True)
class RoundWork:
    counts: dict[str, float]  # overhead terms: round (1), layer (decoder layers), sequence (chunks)
    flops: dict[str, float]  # compute term -> FLOPs this round
    bytes: float  # weights + KV reads + state copies

    def features(self) -> list[float]:
        """Regressors of a linear fit, in `feature_names()` order."""
        return [self.counts[t] for t in OVERHEAD_TERMS] + [self.flops[t] for t in COMPUTE_TERMS]


def feature_names() -> list[str]:
    return list(OVERHEAD_TERMS) + list(COMPUTE_TERMS)


# Beside the fitted-rates terms, the squared token count of the round: on a CPU a token costs
# more in a large round than in a small one once the round's activations outgrow a core's cache,
# which no term linear in tokens can price at both ends of a round budget (`token_pair_s`).
PAIR_TERM = "token_pairs"
# And the cached KV a round's chunks read, in elements (K and V values over every attention layer):
# on a CPU each chunk gathers its prefix's KV from the paged pool before it attends, memory traffic
# per cached token however few new tokens read it, which FLOPs of new x cached pairs misprice at
# both ends (16 new tokens after 1024 cached cost more than their pairs, 256 less) (`prefix_kv_s`).
PREFIX_KV_TERM = "prefix_kv"


def fit_feature_names() -> list[str]:
    """The terms a fit of measured rounds regresses on: `feature_names()`, `PAIR_TERM` and
    `PREFIX_KV_TERM`."""
    return [*feature_names(), PAIR_TERM, PREFIX_KV_TERM]


def fit_features(shape: ModelShape, chunks: Iterable[ChunkShape], dtype_bytes: int = 2) -> list[float]:
    """A round's regressors in `fit_feature_names()` order."""
    chunks = list(chunks)
    tokens = sum(c.length for c in chunks)
    return [*round_work(shape, chunks, dtype_bytes).features(), float(tokens) ** 2, prefix_kv(shape, chunks)]


def prefix_kv(shape: ModelShape, chunks: Iterable[ChunkShape]) -> float:
    """KV elements of the cached prefixes ``chunks`` read, over every attention layer."""
    return float(shape.kv_bytes_per_token(1) * sum(c.start for c in chunks))


def round_work(shape: ModelShape, chunks: Iterable[ChunkShape], dtype_bytes: int = 2) -> RoundWork:
    """FLOPs and bytes of one worker call computing ``chunks`` on a model of ``shape``."""
    chunks = list(chunks)
    tokens = sum(c.length for c in chunks)
    flops = dict.fromkeys(COMPUTE_TERMS, 0.0)
    for params in shape.matmul_params:  # summed in layer order, as the projections run
        flops["matmul"] += 2.0 * params * tokens
    for mixer in shape.mixers:
        prefix = sum(mixer.prefix_flops(c) for c in chunks)
        flops[mixer.kind] += sum(mixer.mix_flops(c) for c in chunks) - prefix
        flops["prefix_attention"] += prefix
    rows = sum(c.logit_rows for c in chunks)
    flops["lm_head"] = 2.0 * shape.hidden * shape.vocab_size * rows
    kv = shape.kv_bytes_per_token(dtype_bytes) * sum(c.end for c in chunks)
    copies = sum(int(c.restores) + c.snapshots for c in chunks)
    weights = shape.read_params(tokens, logits=rows > 0) * dtype_bytes
    counts = {"round": 1.0, "layer": float(shape.layer_calls(chunks)), "sequence": float(len(chunks))}
    return RoundWork(counts, flops, float(weights + kv + copies * shape.state_bytes()))


@dataclass(frozen=True)
class CostModel:
    shape: ModelShape
    hardware: HardwareProfile

    @property
    def tp(self) -> int:
        return 1  # a fitted profile times one device

    def breakdown(self, chunks: Iterable[ChunkShape]) -> RoundBreakdown:
        """Fixed terms, each compute term at its rate, and the memory time compute does not hide."""
        chunks = list(chunks)
        hw = self.hardware
        work = round_work(self.shape, chunks, hw.weight_bytes)
        terms = fixed_terms(hw, chunks, self.shape.layer_calls(chunks))
        if hw.prefix_kv_s and (elements := prefix_kv(self.shape, chunks)):
            terms[PREFIX_KV_TERM] = TermCost(hw.prefix_kv_s * elements, 0.0, 0.0, source(hw, "prefix_kv_s"))
        compute = 0.0
        for t in COMPUTE_TERMS:
            if work.flops[t]:
                seconds = work.flops[t] * hw.seconds_per_flop(t)
                why = hw.sources.get(f"kind_scale.{t}") or source(hw, "flops")  # a term's own, if any
                terms[t] = TermCost(seconds, work.flops[t], 0.0, why)
                compute += seconds
        if hw.bandwidth:
            # the bytes of the round moved in this time alone (at the bandwidth): the rest move
            # while the compute terms run, so the term's rate is the bandwidth, never above it
            shown = max(0.0, work.bytes / hw.bandwidth - compute)
            hidden = f"{source(hw, 'bandwidth')} (the memory time compute does not hide)"
            terms["memory"] = TermCost(shown, 0.0, shown * hw.bandwidth, hidden)
        charge_scheduler(hw, chunks, terms)
        return RoundBreakdown(terms)

    def round_seconds(self, chunks: Iterable[ChunkShape]) -> float:
        return self.breakdown(chunks).seconds
