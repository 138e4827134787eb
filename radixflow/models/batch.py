"""Packed forward batch, paged KV pool and recurrent-state pool.

One round of the torch runner is one `ForwardBatch`: the chunks of every scheduled request are
concatenated into one flat token stream (no padding). Each sequence carries the absolute
position of its first token, the KV block table that covers ``[0, end)``, the state slot to
restore recurrent layers from, and the positions at which to snapshot recurrent state.

Attention layers write the K/V of *every* token of the batch before any sequence reads, so a
sequence may attend to KV written by another sequence of the same round (full-attention reuse
within a round). Recurrent layers can only start from a checkpoint saved by an earlier round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Snapshot:
    """Save recurrent state after the token at absolute position ``position - 1``."""

    position: int  # absolute; state covers tokens [0, position)
    slot: int  # state-pool slot to write


@dataclass(frozen=True)
class Segment:
    """Chunk-relative tokens ``lo..hi-1`` of one sequence, then save the state into ``slots``.

    Never empty (``lo < hi``). Several slots at one position (a checkpoint and the working slot
    of a chunk ending there) all receive the same state.
    """

    lo: int
    hi: int
    slots: tuple[int, ...] = ()


@dataclass
class SeqSpec:
    """One sequence (one request's chunk) inside a packed batch."""

    start: int  # absolute position of the first token computed this round
    length: int  # tokens computed this round (>= 1)
    block_table: list[int]  # KV block ids covering absolute positions [0, start + length)
    restore_slot: int | None = None  # state slot holding state after [0, start); None = zeros
    snapshots: list[Snapshot] = field(default_factory=list)  # start < position <= end; may repeat

    def __post_init__(self) -> None:
        # A segment of zero tokens would reach the recurrent kernels (which divide by the
        # segment length); a snapshot at `start` is the restore point and needs no saving.
        if self.length < 1:
            raise ValueError(f"a sequence computes at least one token, got length {self.length}")
        for snap in self.snapshots:
            if not self.start < snap.position <= self.end:
                raise ValueError(
                    f"snapshot at position {snap.position} outside the chunk ({self.start}, {self.end}]"
                )

    @property
    def end(self) -> int:
        return self.start + self.length

    def segments(self) -> list[Segment]:
        """Split ``[0, length)`` (chunk-relative) at the distinct snapshot positions.

        Every segment holds at least one token; the last one ends at ``length`` (with no slots
        when no snapshot falls on the chunk's end).
        """
        slots: dict[int, list[int]] = {}
        for snap in sorted(self.snapshots, key=lambda s: s.position):
            slots.setdefault(snap.position - self.start, []).append(snap.slot)
        out: list[Segment] = []
        lo = 0
        for hi, group in slots.items():
            out.append(Segment(lo, hi, tuple(group)))
            lo = hi
        if lo < self.length:
            out.append(Segment(lo, self.length))
        return out


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
            self.k[layer] = torch.zeros(n, heads, dim, dtype=dtype, device=device)
            self.v[layer] = torch.zeros(n, heads, dim, dtype=dtype, device=device)
        self.hidden = torch.zeros(n, hidden_size, dtype=dtype, device=device) if hidden_size else None

    def slots(self, block_table: list[int], lo: int, hi: int, device: torch.device) -> torch.Tensor:
        """Flat slot index of absolute positions ``lo..hi-1`` under ``block_table``."""
        pos = torch.arange(lo, hi, device=device)
        table = torch.tensor(block_table, dtype=torch.long, device=device)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size


class StatePool:
    """Recurrent-state checkpoints: for each recurrent layer a tuple of ``[num_slots, *shape]``."""

    def __init__(
        self,
        layout: dict[int, tuple[tuple[int, ...], ...]],
        num_slots: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.num_slots = num_slots
        self.tensors: dict[int, tuple[torch.Tensor, ...]] = {
            layer: tuple(torch.zeros(num_slots, *s, dtype=dtype, device=device) for s in shapes)
            for layer, shapes in layout.items()
        }

    def load(self, layer: int, slot: int | None) -> tuple[torch.Tensor, ...] | None:
        """Copies of the state in ``slot`` (None when starting from scratch)."""
        if slot is None:
            return None
        return tuple(t[slot].clone() for t in self.tensors[layer])

    def save(self, layer: int, slot: int, state: tuple[torch.Tensor, ...]) -> None:
        """Overwrite ``slot`` of ``layer`` with ``state`` (mutates the pool)."""
        for dst, src in zip(self.tensors[layer], state, strict=True):
            dst[slot].copy_(src)

    def copy_slot(self, src: int, dst: int) -> None:
        for tensors in self.tensors.values():
            for t in tensors:
                t[dst].copy_(t[src])


@dataclass
class ForwardBatch:
    """Everything a model's forward needs for one round."""

    input_ids: torch.Tensor  # [T] long, chunks of all sequences concatenated
    positions: torch.Tensor  # [T] long, absolute positions
    seqs: list[SeqSpec]
    kv: KVPool
    state: StatePool

    # The index tensors below are the same for every attention layer: built once per batch.
    @cached_property
    def offsets(self) -> list[int]:
        """Cumulative chunk lengths: sequence i occupies ``[offsets[i], offsets[i+1])``."""
        out = [0]
        for s in self.seqs:
            out.append(out[-1] + s.length)
        return out

    @cached_property
    def context_slots(self) -> list[torch.Tensor]:
        """Per sequence, the KV-pool slots of positions ``[0, end)``."""
        device = self.input_ids.device
        return [self.kv.slots(s.block_table, 0, s.end, device) for s in self.seqs]

    @cached_property
    def new_slots(self) -> torch.Tensor:
        """KV-pool slots of every token computed this round, in batch order."""
        return torch.cat([ctx[s.start :] for ctx, s in zip(self.context_slots, self.seqs, strict=True)])

    @cached_property
    def masks(self) -> list[torch.Tensor | None]:
        """Per sequence, the causal mask over its context (None: plain lower triangle from 0)."""
        device = self.input_ids.device
        return [None if s.start == 0 else _causal_mask(s.start, s.length, s.end, device) for s in self.seqs]

    @classmethod
    def build(
        cls, chunks: list[tuple[list[int], SeqSpec]], kv: KVPool, state: StatePool, device: str
    ) -> ForwardBatch:
        """Pack ``(chunk_token_ids, spec)`` pairs into one batch."""
        ids: list[int] = []
        pos: list[int] = []
        for tokens, spec in chunks:
            if len(tokens) != spec.length:
                raise ValueError("chunk token count does not match its SeqSpec.length")
            ids.extend(tokens)
            pos.extend(range(spec.start, spec.end))
        return cls(
            input_ids=torch.tensor(ids, dtype=torch.long, device=device),
            positions=torch.tensor(pos, dtype=torch.long, device=device),
            seqs=[spec for _, spec in chunks],
            kv=kv,
            state=state,
        )

    def last_token_indices(self) -> torch.Tensor:
        offs = self.offsets
        return torch.tensor([o - 1 for o in offs[1:]], dtype=torch.long, device=self.input_ids.device)


def paged_attention(
    layer: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    batch: ForwardBatch,
    scale: float,
) -> torch.Tensor:
    """Causal attention over the paged KV cache for every sequence of ``batch``.

    ``q``: ``[T, heads, dim]``; ``k``/``v``: ``[T, kv_heads, dim]`` for the batch's new tokens.
    First writes all new K/V into the pool (mutates ``batch.kv``), then lets each sequence attend
    to positions ``[0, end)`` of its block table. Returns ``[T, heads, dim]``.
    """
    kc, vc = batch.kv.k[layer], batch.kv.v[layer]
    offs = batch.offsets
    kc[batch.new_slots] = k.to(kc.dtype)
    vc[batch.new_slots] = v.to(vc.dtype)
    out = torch.empty_like(q)
    heads, kv_heads = q.shape[1], k.shape[1]
    for i, (s, ctx, mask) in enumerate(zip(batch.seqs, batch.context_slots, batch.masks, strict=True)):
        keys = kc[ctx].to(q.dtype).transpose(0, 1)  # [kv_heads, end, dim]
        vals = vc[ctx].to(q.dtype).transpose(0, 1)
        if kv_heads != heads:
            keys = keys.repeat_interleave(heads // kv_heads, dim=0)
            vals = vals.repeat_interleave(heads // kv_heads, dim=0)
        qi = q[offs[i] : offs[i + 1]].transpose(0, 1)  # [heads, len, dim]
        # 4-D inputs select the fused (flash) CPU kernel; 3-D ones fall back to the math path.
        # From position 0 the causal mask is the plain lower triangle, so is_causal suffices.
        o = F.scaled_dot_product_attention(
            qi[None], keys[None], vals[None], attn_mask=mask, is_causal=s.start == 0, scale=scale
        )[0]
        out[offs[i] : offs[i + 1]] = o.transpose(0, 1)
    return out


def _causal_mask(start: int, length: int, end: int, device: torch.device) -> torch.Tensor:
    rows = torch.arange(start, start + length, device=device).unsqueeze(1)
    cols = torch.arange(end, device=device).unsqueeze(0)
    return cols <= rows
