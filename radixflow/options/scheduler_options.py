"""`SchedulerOptions`: the engine options of the scheduler and the cache (policy, placement,
eviction, admission, round budgets, block size, capacities, the shared memory budget), the
``scheduler`` group of every door's flags; `EngineOptions` holds them with the rest."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from radixflow.cache.eviction import EVICTION_POLICIES
from radixflow.options.sizes import MAX_MEMORY, Bytes
from radixflow.options.spec import option
from radixflow.scheduler.admission import ADMISSIONS
from radixflow.scheduler.config import SchedulerConfig
from radixflow.scheduler.placement import PLACEMENTS
from radixflow.scheduler.policy import SCHEDULING_POLICIES

# Cache capacities: every block and slot is bookkept in Python and, on the torch runner, allocated
# as real tensors up front (the torch pools are checked against memory when the model is known).
MAX_KV_BLOCKS = 1 << 22
MAX_STATE_SLOTS = 1 << 20
MAX_BLOCK_SIZE = 1 << 16
MAX_COUNT = 1 << 31  # token budget and requests per round: plain counters, no allocation


def _scheduler_default(name: str) -> Any:
    """The default `SchedulerConfig` declares for ``name``: the round budgets are declared there
    (the scheduler owns them) and read here, so each has one declaration."""
    return {f.name: f.default for f in dataclasses.fields(SchedulerConfig)}[name]


def _names(registry: Mapping[str, object]) -> Callable[[], list[str]]:
    return lambda: sorted(registry)


@dataclass(frozen=True)
class SchedulerOptions:
    policy: str = option(
        "adaptive", "scheduling policy", str, choices=_names(SCHEDULING_POLICIES), group="scheduler"
    )
    placement: str | None = option(
        None,
        "where recurrent-state checkpoints go (default: the policy's own: lone for adaptive, branch "
        "for native and radixflow)",
        str,
        choices=_names(PLACEMENTS),
        group="scheduler",
    )
    eviction: str = option(
        "lru",
        "which cached entry is evicted first",
        str,
        choices=_names(EVICTION_POLICIES),
        group="scheduler",
    )
    admission: str = option(
        "all",
        "which wanted checkpoints may evict cached ones when state slots are short (likely: only "
        "where reuse is likely)",
        str,
        choices=_names(ADMISSIONS),
        group="scheduler",
    )
    token_budget: int = option(
        _scheduler_default("token_budget"),
        "tokens computed per round, decode steps too (at least one block)",
        int,
        low=1,
        high=MAX_COUNT,
        group="scheduler",
        metavar="N",
    )
    max_requests: int = option(
        _scheduler_default("max_requests"),
        "chunks per round",
        int,
        low=1,
        high=MAX_COUNT,
        group="scheduler",
        metavar="N",
    )
    block_size: int = option(
        _scheduler_default("block_size"),
        "tokens per KV block",
        int,
        low=1,
        high=MAX_BLOCK_SIZE,
        group="scheduler",
        metavar="N",
    )
    kv_blocks: int | None = option(
        None,
        f"KV capacity in blocks, at most {MAX_KV_BLOCKS} (default: sim "
        f"{_scheduler_default('num_blocks')}; torch: sized to the "
        "workload where there is one, else 1024)",
        int,
        low=1,
        high=MAX_KV_BLOCKS,
        group="scheduler",
        metavar="N",
    )
    state_slots: int | None = option(
        None,
        f"recurrent-state checkpoint slots, at most {MAX_STATE_SLOTS} (default: sim "
        f"{_scheduler_default('num_state_slots')}, torch 256; "
        "a full-attention model gets none)",
        int,
        low=0,
        high=MAX_STATE_SLOTS,
        group="scheduler",
        metavar="N",
    )
    cache_memory: int | str | None = option(
        None,
        "one memory budget for the cache, shared on demand by KV blocks and recurrent-state "
        "checkpoints, each charged at its real size: bytes, or a size with a unit, e.g. 2GiB, 512MB, "
        "300M (M, G: powers of 1000; Mi, Gi: of 1024); kv_blocks and state_slots then only cap each "
        "kind (default: no shared budget, the two capacities alone)",
        Bytes,  # an integer of bytes (LLM(...), a TOML cell) as max_body_bytes takes one; held as given
        low=1,
        high=MAX_MEMORY,
        group="scheduler",
        metavar="SIZE",
    )
