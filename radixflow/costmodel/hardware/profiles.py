"""Hardware profiles: the coefficients of the cost model, and the built-in ones (`HARDWARE`, with
sources); a profile's checks are `profile_checks`', reading one from a file `profile_files`'.

A profile says what one worker call costs: fixed parts (per call, different for calls with prefill
and decode-only calls; per decoder layer; per scheduled sequence; the scheduler's own CPU time,
overlapped with the worker call or in series) plus the work. The work is costed one of two ways
(`radixflow.costmodel.round_cost.by_profile.round_cost_model`): a profile that names ``kernels``
(the H100/H200 profiles) sums the time of every kernel the round runs, each from a `KernelTimes`;
one that does not (the CPU profile, profiles fitted by `radixflow calibrate`) takes the larger of compute time
(FLOPs of each cost term at that term's fitted rate) and memory time (bytes at the bandwidth). A
request's own cost (tokenization, API) is added to its latency, never to a round.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from radixflow.costmodel.hardware.gpu_figures import (
    DECODE_FIXED_S,
    DENSE_BF16_FLOPS,
    PREFILL_FIXED_S,
    REQUEST_OVERHEAD_S,
    SCHEDULER_CHUNK_S,
    SCHEDULER_ROUND_S,
    SRC_DECODE_FIXED,
    SRC_FLOPS,
    SRC_H100_MEM,
    SRC_H200_MEM,
    SRC_KERNELS,
    SRC_PER_SEQUENCE,
    SRC_PREFILL_FIXED,
    SRC_REQUEST,
    SRC_SCHEDULER,
)
from radixflow.costmodel.hardware.profile_checks import profile_error, profile_problems
from radixflow.costmodel.kernel_times.sources import READS_PROFILE_FLOPS
from radixflow.problems import plain

# A term split off another: a profile written before the split prices it at the other's scale, so
# its rounds cost what they did (attention over a chunk's cached prefix was part of "attention").
SPLIT_FROM = {"prefix_attention": "attention"}

SCHEDULER_MODES = {"overlap": True, "serial": False}  # option value -> HardwareProfile.scheduler_overlap


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    flops: float  # FLOP/s of a term with scale 1.0
    bandwidth: float | None  # bytes/s; None: memory time is not modelled apart (inside fitted terms)
    round_overhead_s: float  # fixed cost of one worker call (with prefill, where decode_overhead_s is set)
    per_request_s: float  # per scheduled chunk (metadata, launches per sequence)
    layer_overhead_s: float = 0.0  # fixed cost per decoder layer per worker call (a fitted CPU figure)
    # seconds per squared token count of a worker call (a fitted CPU figure): a round's per-token
    # cost grows with its size once its activations outgrow a core's cache
    token_pair_s: float = 0.0
    # seconds per cached KV element (K or V value, every attention layer) a chunk reads (a fitted
    # CPU figure): gathering a prefix's KV from the paged pool costs per cached token
    prefix_kv_s: float = 0.0
    kind_scale: dict[str, float] = field(default_factory=dict)  # term -> cost per FLOP vs 1/flops
    weight_bytes: int = 2  # bytes per weight and per KV element
    memory_bytes: float | None = None  # device memory, for the record
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it comes from
    calibration: dict[str, Any] | None = None  # how a fitted profile was measured and how well it fits
    decode_overhead_s: float | None = None  # fixed cost of a decode-only worker call (None: round_overhead_s)
    request_overhead_s: float = 0.0  # each request's own cost (tokenize, API): in its latency, in no round
    scheduler_round_s: float = 0.0  # the scheduler's CPU time per round (modelled, not timed)
    scheduler_chunk_s: float = 0.0  # ... and per prefill chunk it schedules
    scheduler_overlap: bool = True  # hidden behind the worker call (async scheduling) or in series
    kernels: str | None = None  # kernel-time source of the work (None: fitted per-term rates)

    def __post_init__(self) -> None:
        """Every profile, however made (file, fit, `replace`), is one the sim can use; numpy's
        numbers and bools (a fit's, an array's) read as Python's, as the engine options read them."""
        for f in fields(self):
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))
        if isinstance(self.kind_scale, dict):
            object.__setattr__(self, "kind_scale", {k: plain(v) for k, v in self.kind_scale.items()})
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if problems := profile_problems(values):
            raise profile_error(f"hardware profile {self.name!r}", problems[0])

    def seconds_per_flop(self, term: str) -> float:
        scale = self.kind_scale.get(term)
        if scale is None and term in SPLIT_FROM:
            scale = self.kind_scale.get(SPLIT_FROM[term])
        return (1.0 if scale is None else scale) / self.flops

    @property
    def prices_by_flops(self) -> bool:
        """Whether ``flops`` prices any work: fitted rates and roofline kernels read it, measured
        kernels (h100, h200) time their GPU's own and do not."""
        return self.kernels is None or self.kernels in READS_PROFILE_FLOPS

    def fixed_call_s(self, decode_only: bool) -> float:
        """The fixed cost of one worker call, layers apart."""
        if decode_only and self.decode_overhead_s is not None:
            return self.decode_overhead_s
        return self.round_overhead_s

    def with_fixed_round_cost(self, seconds: float) -> HardwareProfile:
        """The same hardware with the whole fixed cost of a worker call with prefill set to
        ``seconds`` (the per-layer part dropped; a decode-only call keeps its own figure, if any)."""
        return replace(self, round_overhead_s=seconds, layer_overhead_s=0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gpu(name: str, bandwidth: float, memory_gb: float, mem_source: str) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        flops=DENSE_BF16_FLOPS,
        bandwidth=bandwidth,
        round_overhead_s=PREFILL_FIXED_S,
        per_request_s=0.0,
        weight_bytes=2,
        memory_bytes=memory_gb * 1e9,
        sources={
            "flops": SRC_FLOPS,
            "bandwidth": mem_source,
            "memory_bytes": mem_source,
            "round_overhead_s": SRC_PREFILL_FIXED,
            "decode_overhead_s": SRC_DECODE_FIXED,
            "request_overhead_s": SRC_REQUEST,
            "scheduler": SRC_SCHEDULER,
            "per_request_s": SRC_PER_SEQUENCE,
            "kernels": SRC_KERNELS,
        },
        decode_overhead_s=DECODE_FIXED_S,
        request_overhead_s=REQUEST_OVERHEAD_S,
        scheduler_round_s=SCHEDULER_ROUND_S,
        scheduler_chunk_s=SCHEDULER_CHUNK_S,
        kernels=f"measured-{name}",
    )


HARDWARE: dict[str, HardwareProfile] = {
    "h100": _gpu("h100", 3.35e12, 80, SRC_H100_MEM),
    "h200": _gpu("h200", 4.8e12, 141, SRC_H200_MEM),
    "cpu": HardwareProfile(
        "cpu",
        1.0e11,
        2.0e10,
        2e-3,
        1e-3,
        weight_bytes=4,
        sources={
            "all": "not measured: assumed, rough figures for a small CPU (100 GFLOP/s, 20 GB/s, 2 ms a "
            "call, 1 ms a sequence); `radixflow calibrate` measures a real profile"
        },
    ),
}
