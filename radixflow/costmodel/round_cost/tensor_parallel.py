"""Tensor parallelism: how many GPUs a model needs so its weights and a minimum cache pool fit.

The smallest power of two that fits (Megatron-style tensor parallelism, as vLLM's
``--tensor-parallel-size``): each GPU holds 1/tp of every weight, KV head and state head.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.costmodel.shape.model_shape import ModelShape

MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization: the rest is activations, graphs
MIN_POOL_TOKENS = 32_768  # KV for one long sequence, or 16 of 2k tokens
MIN_POOL_SEQUENCES = 32  # recurrent-state slots: the default requests per round
MAX_TP = 64


@dataclass(frozen=True)
class Parallelism:
    tp: int  # GPUs per model replica
    need_bytes: float  # weights plus the minimum pool, over all GPUs
    fits: bool  # False: not even MAX_TP GPUs hold it (tp is MAX_TP then)


def choose_tp(shape: ModelShape, memory_bytes: float, dtype_bytes: int) -> Parallelism:
    """The smallest power-of-two tp at which weights and a minimum KV/state pool fit in
    ``MEMORY_UTILIZATION`` of each GPU's ``memory_bytes``. Pure."""
    pool = MIN_POOL_TOKENS * shape.kv_bytes_per_token(dtype_bytes) + MIN_POOL_SEQUENCES * shape.state_bytes()
    need = float(shape.total_params() * dtype_bytes + pool)
    usable = memory_bytes * MEMORY_UTILIZATION
    tp = 1
    while need / tp > usable and tp < MAX_TP:
        tp *= 2
    return Parallelism(tp, need, need / tp <= usable)


def share(count: int, tp: int) -> int:
    """One GPU's share of ``count`` heads or columns (at least one: a head is replicated, not split)."""
    return max(1, -(-count // tp))
