"""What an engine over a runner's model runs with: the scheduler config the model decides parts of
(`run_config`), and its cache, sized and budgeted from the entry sizes the runner reports."""

from __future__ import annotations

from dataclasses import replace

from radixflow.cache.eviction import EntrySizes
from radixflow.cache.eviction_checked import make_eviction_policy
from radixflow.cache.ledger import CacheBudget
from radixflow.cache.radix import RadixCache
from radixflow.engine.runner import ModelInfo
from radixflow.scheduler.config import SchedulerConfig


def run_config(config: SchedulerConfig, model: ModelInfo) -> SchedulerConfig:
    """The scheduler config an engine over a runner of ``model`` runs with: what the model decides
    (recurrent state, whether a round restores state saved in it, end-of-sequence ids) taken from
    it, whatever ``config`` said. Pure; what a report of the run should record."""
    return replace(
        config,
        has_recurrent=model.has_recurrent,
        same_round_state=model.same_round_state and model.has_recurrent,
        eos_token_ids=model.eos_token_ids,
    )


def cache_budget(config: SchedulerConfig, model: ModelInfo) -> CacheBudget:
    """The cache's byte budget (``config.cache_memory``), its entries charged at the sizes the
    runner reports (the cost model's in the sim, the pools' tensors on the torch runner)."""
    unknown = model.kv_bytes_per_token < 1 or (model.has_recurrent and model.checkpoint_bytes < 1)
    if config.cache_memory is not None and unknown:
        raise ValueError(f"cache_memory needs entry sizes; runner model {model.name!r} reports none")
    return CacheBudget(
        block_bytes=max(model.kv_bytes_per_token, 1) * config.block_size,
        slot_bytes=max(model.checkpoint_bytes, 1),
        budget_bytes=config.cache_memory,
    )


def make_cache(config: SchedulerConfig, model: ModelInfo, eviction: str) -> RadixCache:
    """The engine's cache: ``config``'s blocks and slots (``config`` as `run_config` made it),
    evicting by the ``eviction`` policy, its entries charged at the runner's sizes."""
    budget = cache_budget(config, model)
    pools = config.num_blocks * budget.block_bytes + config.num_state_slots * budget.slot_bytes
    held = pools if budget.budget_bytes is None else min(pools, budget.budget_bytes)
    sizes = EntrySizes(  # unknown sizes (0) count as one byte: tokens alone decide then
        max(model.kv_bytes_per_token, 1),
        max(model.checkpoint_bytes, 1),
        config.has_recurrent,
        capacity=max(held, 1),
    )
    return RadixCache(
        config.block_size,
        config.num_blocks,
        config.num_state_slots,
        make_eviction_policy(eviction, sizes),
        budget,
    )
