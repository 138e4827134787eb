"""Memory pressure: a workload's working set, engine options holding a share of it, and what a run
under pressure cost (hit rate, recomputed tokens and FLOPs, TTFT, evictions by kind).

The working set is what an unbounded cache (`lru`, every checkpoint admitted) holds at its fullest
over the workload, in bytes at the model's sizes (KV blocks, checkpoints and running requests'
own state: `RadixCache.memory`). A share of it is one byte budget (``cache_memory``) shared by
KV and checkpoints; never below what the longest prompt needs twice over (it fits, and another
beside it) plus `MIN_SLOTS` states.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from radixflow.bench.harness import fresh_copy
from radixflow.bench.metrics import percentile
from radixflow.engine.engine import Engine
from radixflow.engine.records import RoundRecord
from radixflow.engine.runner import Runner
from radixflow.options import EngineOptions, plan_engine
from radixflow.options.scheduler_options import MAX_KV_BLOCKS, MAX_STATE_SLOTS
from radixflow.scheduler.placement import LonePlacement
from radixflow.scheduler.request import Request, RequestStatus

# the most engine options allow: below what a valid workload needs (70,000 one-off prompts hold
# 70,000 tail checkpoints), the unbounded run evicted and its cell failed. Sized to the workload
# under these (`unbounded_capacity`): a cap costs nothing until it is used (`IdPool`).
UNBOUNDED_BLOCKS = MAX_KV_BLOCKS
UNBOUNDED_SLOTS = MAX_STATE_SLOTS
MIN_SLOTS = 4  # the placement's own saves and a resume point, with room to spare
# checkpoints one request may leave beside one per round of its prompt (`align`): its tail, a
# branch point, a predicted fork, and the rungs of `lone`'s cold-start ladder
SAVES_PER_REQUEST = 3 + LonePlacement.LADDER


@dataclass(frozen=True)
class WorkingSet:
    """What an unbounded cache holds: at its fullest (bytes), and at the workload's end."""

    peak_bytes: int  # KV, checkpoints and running requests' state, at the fullest round
    kv_blocks: int  # cached KV blocks at the end
    checkpoints: int  # checkpoints at the end
    block_bytes: int  # one KV block at the model's size
    checkpoint_bytes: int  # one checkpoint (every recurrent layer's state; 1 without any)


def unbounded_capacity(options: EngineOptions, requests: list[Request]) -> tuple[int, int]:
    """KV blocks and state slots with room for everything ``requests`` could ever cache (their
    whole prompts, a few checkpoints each), so a runner that allocates its pools up front (torch)
    allocates no more than that; never past what engine options allow. Pure."""
    bs = options.block_size
    blocks = sum(-(-(len(r.prompt) + 1) // bs) for r in requests) + 1
    slots = sum(_saves(len(r.prompt), options) for r in requests) + min(options.max_requests, len(requests))
    return min(blocks, UNBOUNDED_BLOCKS), min(slots + MIN_SLOTS, UNBOUNDED_SLOTS)


def measure_working_set(options: EngineOptions, requests: list[Request]) -> WorkingSet:
    """Run ``requests`` on an unbounded cache (`lru`, `all`, no budget) and read what it holds.
    Untraced: this measuring run is none of the cell's, and a flush of it would write it over an
    older trace at ``trace_out`` before the cell's own runs (which may yet be refused) began."""
    kv_blocks, state_slots = unbounded_capacity(options, requests)
    unbounded = options.replace(
        kv_blocks=kv_blocks,
        state_slots=state_slots,
        cache_memory=None,
        eviction="lru",
        admission="all",
        trace_out=None,
    )
    setup = plan_engine(unbounded).build([len(r.prompt) for r in requests])
    engine = setup.engine()
    peak = 0

    def fullest(record: RoundRecord) -> None:
        nonlocal peak
        peak = max(peak, engine.cache.memory().used_bytes)

    engine.run(fresh_copy(requests), on_round=fullest)
    if sum(engine.cache.evictions().values()):
        raise RuntimeError("the unbounded run evicted: raise SAVES_PER_REQUEST or UNBOUNDED_*")
    usage, ledger = engine.cache.usage(), engine.cache.ledger
    return WorkingSet(
        peak, usage.cached_blocks, usage.checkpoint_slots, ledger.block_bytes, ledger.slot_bytes
    )


def _saves(prompt_len: int, options: EngineOptions) -> int:
    """The most checkpoints a prompt of ``prompt_len`` tokens may leave: one per round its prompt
    spans and `SAVES_PER_REQUEST`, never more than one per block and its tail. Pure."""
    rounds = -(-prompt_len // options.token_budget)
    return min(rounds + SAVES_PER_REQUEST, -(-prompt_len // options.block_size) + 1)


def under_pressure(
    options: EngineOptions, ws: WorkingSet, share: float, longest_prompt: int
) -> EngineOptions:
    """``options`` with a cache budget of ``share`` of ``ws``'s bytes (see the module's floor)."""
    blocks = 2 * math.ceil(longest_prompt / options.block_size) + 1
    floor = blocks * ws.block_bytes + MIN_SLOTS * ws.checkpoint_bytes
    budget = max(math.ceil(share * ws.peak_bytes), floor)
    return options.replace(kv_blocks=None, state_slots=None, cache_memory=str(budget))


def evictions(engine: Engine) -> dict[str, int]:
    """Evictions by kind on ``engine`` so far: KV leaves, and checkpoints (with their leaf or
    alone). Pure."""
    return engine.cache.evictions()


def pressure_figures(requests: list[Request], flops_per_token: float | None) -> dict[str, Any]:
    """Hit rate, recomputed prompt tokens (and their FLOPs at ``flops_per_token``; None: not
    known), TTFT p50 / p95 (`percentile`'s rule, as every latency percentile) and mean latency
    of the finished ``requests``. Pure."""
    done = [r for r in requests if r.status is RequestStatus.FINISHED]
    prompt = sum(len(r.prompt) for r in done)
    recomputed = prompt - sum(r.reused for r in done)
    ttft = [r.ttft_s for r in done if r.ttft_s is not None]
    latency = [r.latency_s for r in done if r.latency_s is not None]
    return {
        "hit_rate": (prompt - recomputed) / prompt if prompt else None,
        "recomputed_tokens": recomputed,
        "recomputed_flops": None if flops_per_token is None else recomputed * flops_per_token,
        "ttft_p50_ms": _ms(percentile(ttft, 50)),
        "ttft_p95_ms": _ms(percentile(ttft, 95)),
        "mean_latency_ms": 1e3 * statistics.fmean(latency) if latency else None,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def dense_flops_per_token(runner: Runner) -> float | None:
    """2 x the active parameters: a token's matmul FLOPs (attention over the context left out),
    where the runner knows its shape (the sim); None elsewhere."""
    spec = getattr(runner, "spec", None)
    return None if spec is None else 2.0 * spec.active_params()
