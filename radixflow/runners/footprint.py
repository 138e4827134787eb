"""What a checkpoint's torch pools cost per KV slot and per state slot, before anything is allocated."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

BYTES_PER_ELEMENT = 4  # counted in float32; KV then scales to the runner's dtype (`TorchChoice.entry_bytes`)


@dataclass(frozen=True)
class Footprint:
    kv_bytes_per_token: int  # K and V of every attention layer, and the final hidden state beside them
    state_bytes_per_slot: int  # every recurrent layer's state; 0 for a full-attention model

    @property
    def has_recurrent(self) -> bool:
        return self.state_bytes_per_slot > 0

    def pool_bytes(self, block_size: int, num_blocks: int, num_slots: int) -> int:
        return self.kv_bytes_per_token * block_size * num_blocks + self.state_bytes_per_slot * num_slots


def footprint(path: str | Path) -> Footprint:
    """The model at ``path`` built on torch's meta device (no weights read, nothing allocated).

    Checks the checkpoint first as loading it would, values aside (config, tensor names and shapes):
    a `CheckpointError` names what is wrong before anything is allocated.
    """
    import torch

    from radixflow.models.io.loader import check_checkpoint
    from radixflow.models.registry import model_class

    config = check_checkpoint(path)
    with torch.device("meta"):
        net = model_class(config.model_type)(config)
    kv = sum(2 * heads * dim for heads, dim in net.kv_layout().values()) + int(config.hidden_size)
    state = sum(math.prod(s) for shapes in net.state_layout().values() for s in shapes)
    return Footprint(BYTES_PER_ELEMENT * kv, BYTES_PER_ELEMENT * state)


def set_torch_threads(threads: int | None, cpus: int) -> None:
    """torch's intra-op thread count for this process (the torch runner's forward passes):
    ``threads``; none given, torch's own count (a thread per CPU of the affinity mask, or
    OMP_NUM_THREADS) at most ``cpus``, this machine's: in a container whose CPU quota is below
    its mask, torch's own count ran a thread per CPU of the host on the few the quota gives."""
    import torch

    want = min(torch.get_num_threads(), cpus) if threads is None else threads
    if want != torch.get_num_threads():
        torch.set_num_threads(want)
