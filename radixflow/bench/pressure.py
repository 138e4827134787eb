"""Memory pressure: a workload's working set, engine options holding a share of it, and what a run
under pressure cost (hit rate, recomputed tokens and FLOPs, TTFT, evictions by kind).

The working set is what an unbounded cache (`lru`, every checkpoint admitted) holds once the
workload is done: its KV blocks and checkpoints, and their bytes at the model's sizes. A share of
it caps the cache at that share of each; KV never below twice the longest prompt (a request
fits, and another beside it), checkpoints never below `MIN_SLOTS`.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from radixflow.bench.harness import fresh_copy
from radixflow.cache.eviction import EntryKind
from radixflow.cache.node import Node
from radixflow.engine.engine import Engine
from radixflow.engine.runner import Runner
from radixflow.options import EngineOptions, plan_engine
from radixflow.scheduler.request import Request, RequestStatus

UNBOUNDED_BLOCKS = 1 << 20
UNBOUNDED_SLOTS = 1 << 16
MIN_SLOTS = 4  # the placement's own saves and a resume point, with room to spare


@dataclass(frozen=True)
class WorkingSet:
    """What an unbounded cache holds at the end of a workload."""

    kv_blocks: int
    checkpoints: int
    block_bytes: int  # one KV block at the model's size
    checkpoint_bytes: int  # one checkpoint (every recurrent layer's state)

    @property
    def bytes(self) -> int:
        return self.kv_blocks * self.block_bytes + self.checkpoints * self.checkpoint_bytes


def measure_working_set(options: EngineOptions, requests: list[Request]) -> WorkingSet:
    """Run ``requests`` on an unbounded cache (`lru`, `all`) and read what it holds."""
    unbounded = options.replace(
        kv_blocks=UNBOUNDED_BLOCKS, state_slots=UNBOUNDED_SLOTS, eviction="lru", admission="all"
    )
    setup = plan_engine(unbounded).build([len(r.prompt) for r in requests])
    engine = setup.engine()
    evicted = count_evictions(engine)
    engine.run(fresh_copy(requests))
    if sum(evicted.values()):
        raise RuntimeError("the unbounded run evicted: raise UNBOUNDED_BLOCKS / UNBOUNDED_SLOTS")
    usage, model = engine.cache.usage(), engine.runner.model
    return WorkingSet(
        usage.cached_blocks,
        usage.checkpoint_slots,
        max(model.kv_bytes_per_token, 1) * setup.scheduler.block_size,
        max(model.checkpoint_bytes, 1),
    )


def under_pressure(
    options: EngineOptions, ws: WorkingSet, share: float, longest_prompt: int
) -> EngineOptions:
    """``options`` with the cache capped at ``share`` of ``ws`` (see the module's floors)."""
    block = options.block_size
    floor = 2 * math.ceil(longest_prompt / block) + 1
    kv = max(math.ceil(share * ws.kv_blocks), floor)
    slots = max(math.ceil(share * ws.checkpoints), MIN_SLOTS)
    return options.replace(kv_blocks=kv, state_slots=slots)


def count_evictions(engine: Engine) -> Counter[str]:
    """Evictions by kind (`EntryKind` values) on ``engine`` from now on: the policy's `evicted`
    hook is wrapped (mutates the engine's policy object)."""
    counts: Counter[str] = Counter({kind.value: 0 for kind in EntryKind})
    policy = engine.cache.evictor.policy
    inner = policy.evicted

    def counted(node: Node, kind: EntryKind) -> None:
        counts[kind.value] += 1
        inner(node, kind)

    policy.evicted = counted  # type: ignore[method-assign]
    return counts


def pressure_figures(requests: list[Request], flops_per_token: float | None) -> dict[str, Any]:
    """Hit rate, recomputed prompt tokens (and their FLOPs at ``flops_per_token``; None: not
    known), TTFT p50 / p95 and mean latency of the finished ``requests``. Pure."""
    done = [r for r in requests if r.status is RequestStatus.FINISHED]
    prompt = sum(len(r.prompt) for r in done)
    recomputed = prompt - sum(r.reused for r in done)
    ttft = sorted(r.ttft_s for r in done if r.ttft_s is not None)
    latency = [r.latency_s for r in done if r.latency_s is not None]
    return {
        "hit_rate": (prompt - recomputed) / prompt if prompt else None,
        "recomputed_tokens": recomputed,
        "recomputed_flops": None if flops_per_token is None else recomputed * flops_per_token,
        "ttft_p50_ms": 1e3 * statistics.median(ttft) if ttft else None,
        "ttft_p95_ms": 1e3 * ttft[round(0.95 * (len(ttft) - 1))] if ttft else None,
        "mean_latency_ms": 1e3 * statistics.fmean(latency) if latency else None,
    }


def dense_flops_per_token(runner: Runner) -> float | None:
    """2 x the active parameters: a token's matmul FLOPs (attention over the context left out),
    where the runner knows its shape (the sim); None elsewhere."""
    spec = getattr(runner, "spec", None)
    return None if spec is None else 2.0 * spec.active_params()
