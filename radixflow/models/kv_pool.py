"""The paged KV pool: each attention layer's K and V by slot (and each slot's final hidden state,
for prompt logprobs), gathered by slot into reused buffers."""

from __future__ import annotations

import torch

from radixflow.models.pool_memory import pool_zeros


class KVPool:
    """Paged KV storage: for each attention layer, ``[num_blocks * block_size, kv_heads, dim]``.

    With ``hidden_size`` the pool also keeps, per slot, the final-norm hidden state of the
    position stored there (``hidden``: ``[num_blocks * block_size, hidden_size]``), written by the
    runner, not by the model: the output head's input, so a reused prefix's prompt logprobs need
    no layer re-run. It shares the slot with the KV, so it is valid exactly where the KV is.
    """

    def __init__(
        self,
        layout: dict[int, tuple[int, int]],
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
        hidden_size: int = 0,
    ) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        n = num_blocks * block_size
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}
        for layer, (heads, dim) in layout.items():
            # on huge pages where large (pool_memory): the decode kernels stream them each round
            self.k[layer] = pool_zeros((n, heads, dim), dtype, device)
            self.v[layer] = pool_zeros((n, heads, dim), dtype, device)
        self.hidden = pool_zeros((n, hidden_size), dtype, device) if hidden_size else None
        # `gather`'s output buffers (K and V), reused layer after layer and round after round: a
        # fresh multi-megabyte copy per layer costs page faults beside the copy itself
        self._scratch: dict[tuple[int, torch.Size], torch.Tensor] = {}

    def gather(self, cache: torch.Tensor, slots: torch.Tensor, which: int) -> torch.Tensor:
        """Rows ``slots`` of ``cache`` (one of the pool's ``[slots, heads, dim]`` tensors) as
        ``[len(slots), heads, dim]``, in a buffer of this pool's (``which``: 0 for K, 1 for V),
        valid until the next ``gather`` with the same ``which``."""
        key = (which, cache.shape[1:])
        buf = self._scratch.get(key)
        if buf is None or buf.shape[0] < len(slots):  # grown to the largest context gathered
            buf = self._scratch[key] = cache.new_empty(len(slots), *cache.shape[1:])
        out = buf[: len(slots)]
        # a 2-D row gather into an existing buffer: one copy per row, no allocation
        torch.index_select(cache.view(cache.shape[0], -1), 0, slots, out=out.view(len(slots), -1))
        return out

    def slots(self, block_table: list[int], lo: int, hi: int, device: torch.device) -> torch.Tensor:
        """Flat slot index of absolute positions ``lo..hi-1`` under ``block_table``."""
        pos = torch.arange(lo, hi, device=device)
        table = torch.tensor(block_table, dtype=torch.long, device=device)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size
