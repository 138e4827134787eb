"""Tensor parallelism: how many GPUs a model needs so its weights and a minimum cache pool fit.

The smallest power of two that fits (Megatron-style tensor parallelism, as vLLM's
``--tensor-parallel-size``): each GPU holds 1/tp of every weight, KV head and state head.
"""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.costmodel.shape.limits import GROUPED
from radixflow.costmodel.shape.mixer_shapes import Mixer
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


def uneven_split(shape: ModelShape, tp: int) -> str | None:
    """Why ``tp`` GPUs do not split ``shape``'s heads as vLLM requires (None: they do); `share`
    prices any split, each GPU at its rounded-up share of the heads."""
    for i, layer in enumerate(shape.layers):
        for mixer in layer.mixers:
            if (why := _uneven_heads(mixer, tp)) is not None:
                return f"layer {i}'s {mixer.kind} {why} do not split over {tp} GPUs"
    return None


def _uneven_heads(mixer: Mixer, tp: int) -> str | None:
    """A mixer's heads (attention's query heads, the delta rule's value heads, Mamba2's heads) must
    be a multiple of tp, and the heads grouped over them (KV heads, key heads, Mamba2's groups) a
    multiple or a divisor of it (each GPU then holds a copy of one)."""
    grouping = GROUPED.get(type(mixer))
    if grouping is None:
        return None  # LFM2's short conv has no heads
    shared, served = grouping
    heads, groups = getattr(mixer, served), getattr(mixer, shared)
    if heads % tp:
        return f"{served} {heads}"
    return f"{shared} {groups}" if groups % tp and tp % groups else None
