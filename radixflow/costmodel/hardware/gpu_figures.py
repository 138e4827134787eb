"""The public figures behind the built-in GPU profiles, each with where it comes from.

Each is an assumption of the sim, not a measurement here; `costmodel.hardware.profiles` builds the H100
and H200 profiles from them and keeps each source in the profile's ``sources``.
"""

from __future__ import annotations

# Public figures behind the GPU profiles. Each is an assumption of the sim, not a measurement here.
DENSE_BF16_FLOPS = 989e12
SRC_FLOPS = (
    "NVIDIA H100 / H200 datasheets: 989 TFLOP/s dense BF16 Tensor Core (1,979 is the sparse figure); "
    "the roofline kernels run each kernel class at a stated fraction of it "
    "(costmodel/kernel_times/roofline.py)"
)
SRC_H100_MEM = "NVIDIA H100 SXM datasheet: 80 GB HBM3 at 3.35 TB/s"
SRC_H200_MEM = "NVIDIA H200 datasheet: 141 GB HBM3e at 4.8 TB/s"

# Fixed costs of a worker call. The earlier per-layer cost of every call misread
# ai-dynamo/aiconfigurator PR #1166, which adds 0.8 ms x layers once per *request* as a TTFT
# residual (end-to-end time at batch ~1 minus kernel time: HTTP, tokenization, queueing and
# detokenization included), never per worker call.
PREFILL_FIXED_S = 3e-3
PREFILL_FIXED_BAND_S = (1e-3, 10e-3)  # what the experiments sweep (experiments/sensitivity.toml)
SRC_PREFILL_FIXED = (
    "fixed cost of a worker call with prefill: central 3 ms, band 1-10 ms (not measured: assumed; "
    "experiments/sensitivity.toml sweeps the band). The nearest public figure, "
    "ai-dynamo/aiconfigurator PR #1166, finds its kernel-sum time to first token short of the "
    "measured one by 41-52 ms a *request* (9000 input tokens, batch ~1, H200, vLLM 0.18.0, Qwen3 "
    "0.6B-14B) and adds 0.8 ms x layers once per request, not as a cost of each call"
)
DECODE_FIXED_S = 0.4e-3
SRC_DECODE_FIXED = (
    "fixed cost of a decode-only worker call, 0.4 ms, band 0.3-2 ms: not measured, assumed (a CUDA-"
    "graph decode step's launch and bookkeeping). ai-dynamo/aiconfigurator PR #1166 models prefill "
    "dispatch only and gives no decode figure; its companion PR #1164 corrects vLLM decode steps by a "
    "factor, 1 + 0.084 (b - 1)^0.662 (H200, vLLM 0.18.0, Qwen3-8B), not by a fixed cost"
)
REQUEST_OVERHEAD_S = 2e-3
SRC_REQUEST = (
    "each request's own cost before it can be scheduled (HTTP/API and tokenization), 2 ms: an "
    "estimate, not a measurement here (encoding runs ~10-20 us per token in "
    "tenstorrent/tt-inference-server#2173); in the request's latency, in no worker call"
)
SCHEDULER_ROUND_S = 0.1e-3
SCHEDULER_CHUNK_S = 50e-6
SRC_SCHEDULER = (
    "the scheduler's CPU time, modelled from benchmarks/scheduler_overhead.py (docs/policies.md "
    "'Scheduler overhead', its 'Before adaptive' table re-measured at 138179d: native ~0.2 ms per round, "
    "radixflow ~1.7 ms at 32 requests per round; the latest run there, with following and a grid "
    "beside it, reads radixflow 2.4 ms and adaptive 3.1 ms): 0.1 ms per round plus 50 us per prefill "
    "chunk, none per decode step (the split not measured: assumed); a model, not timed at run "
    "time, so sim runs stay deterministic"
)
SRC_PER_SEQUENCE = (
    "no public per-sequence measurement used: a sequence costs only its state restore/snapshot "
    "copies, charged as memory traffic"
)
SRC_KERNELS = (
    "every kernel of the round from a KernelTimes source; 'measured-<gpu>': NVIDIA's measured "
    "latencies (aiconfigurator-core 0.12.0, vLLM 0.24.0 tables, Apache-2.0; "
    "costmodel/kernel_times/data/NOTICE), "
    "interpolated, with labelled rooflines where nothing was measured (Mamba2, short conv); "
    "'roofline': FLOPs at a stated fraction of the datasheet peak or bytes at the datasheet "
    "bandwidth, whichever is longer, per kernel"
)
