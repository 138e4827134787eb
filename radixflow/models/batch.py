"""One round's packed forward batch (sequences: `seq_spec`; pools: `kv_pool`, `state_pool`).

One round of the torch runner is one `ForwardBatch`: the chunks of every scheduled request are
concatenated into one flat token stream (no padding). Each sequence carries the absolute
position of its first token, the KV block table that covers ``[0, end)``, the state slot to
restore recurrent layers from, and the positions at which to snapshot recurrent state.

Attention layers write the K/V of *every* token of the batch before any sequence reads, so a
sequence may attend to KV written by another sequence of the same round (full-attention reuse
within a round). A recurrent layer runs its sequences in waves (`ForwardBatch.waves`): a sequence
that restores a state another sequence of the round saves runs in a wave after that one's, so a
consumer may follow its producer within a round (the scheduler's `ScanAction.FOLLOW`).

Decode rows (sequences computing one token) are grouped into `DecodeRows`: each layer runs them
in one batched step (a row that saves into the slot it restores updates its state where it lies
in the `StatePool`, the others are gathered in one index op and scattered back; one attention
call over the paged KV), while the other rows keep the chunked per-sequence path.
``batched_decode=False`` sends every row down the per-sequence path, the reference the batched
step is tested against. Attention over the paged KV is `radixflow.models.attention.paged_attention`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from radixflow.models.decode_rows import DecodeContext, DecodeRows, Picked, consecutive, length_groups
from radixflow.models.kernels.backend import Kernels
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.kv_pool import KVPool
from radixflow.models.seq_spec import SeqSpec
from radixflow.models.state_pool import StatePool


@dataclass
class ForwardBatch:
    """Everything a model's forward needs for one round."""

    input_ids: torch.Tensor  # [T] long, chunks of all sequences concatenated
    positions: torch.Tensor  # [T] long, absolute positions
    seqs: list[SeqSpec]
    kv: KVPool
    state: StatePool
    batched_decode: bool = True  # False: every row takes the per-sequence path (the reference)
    kernels: Kernels = TORCH_KERNELS  # what runs the batched decode steps (`models.kernels.backend`)

    @cached_property
    def memo(self) -> dict[object, object]:
        """Values every layer of the round shares, computed by the first that needs them (the
        rotary tables, `layers.Rotary.tables`)."""
        return {}

    # The index tensors below are the same for every layer: built once per batch.
    @cached_property
    def offsets(self) -> list[int]:
        """Cumulative chunk lengths: sequence i occupies ``[offsets[i], offsets[i+1])``."""
        out = [0]
        for s in self.seqs:
            out.append(out[-1] + s.length)
        return out

    @cached_property
    def _wave_of(self) -> list[int]:
        """Each row's wave: 0, or one more than the wave of the earlier row that saves the state
        it restores (a slot's first saver this round; the scheduler orders a producer's chunk
        before its followers')."""
        saved: dict[int, int] = {}
        out = []
        for s in self.seqs:
            wave = 0 if s.restore_slot is None else saved.get(s.restore_slot, -1) + 1
            out.append(wave)
            for snap in s.snapshots:
                saved.setdefault(snap.slot, wave)
        return out

    @cached_property
    def waves(self) -> list[tuple[list[int], torch.Tensor]]:
        """The per-sequence rows (`others`) by wave, each with its flat token indices: a recurrent
        layer runs a wave once the one before it has saved its states. One wave (all of
        `others`) unless a row restores a state saved in this round."""
        rows: dict[int, list[int]] = {}
        for i in self.others:
            rows.setdefault(self._wave_of[i], []).append(i)
        if len(rows) <= 1:
            return [(self.others, self.other_tokens)] if self.others else []
        return [(rows[w], self._tokens_of(rows[w])) for w in sorted(rows)]

    @cached_property
    def _picked(self) -> list[Picked]:
        """The one-token rows as `DecodeRows.build` takes them (none unless ``batched_decode``);
        a row of a later wave stays on the per-sequence path, which runs after the state it
        restores is saved. So does a row saving into a slot an earlier row restores: that row
        reads the state from before the round, and the batched step saves before any
        per-sequence row reads."""
        out: list[Picked] = []
        restored: set[int] = set()  # slots the rows so far restore
        for i, s in enumerate(self.seqs):
            saves = tuple(snap.slot for snap in s.snapshots)
            if self.batched_decode and s.length == 1 and self._wave_of[i] == 0 and restored.isdisjoint(saves):
                out.append((i, self.offsets[i], s.restore_slot, saves))
            if s.restore_slot is not None:
                restored.add(s.restore_slot)
        return out

    @cached_property
    def decode_seqs(self) -> tuple[int, ...]:
        """Batch indices of the one-token rows (`decode`'s ``seqs``, without building its
        index tensors: a decode round's layers need only these and `decode_parts`)."""
        return tuple([i for i, _, _, _ in self._picked])

    @cached_property
    def decode(self) -> DecodeRows:
        """The one-token rows, run by one batched step per layer (empty unless ``batched_decode``),
        in batch order, with their slots as the scheduler names them (the recurrent layers use
        `decode_parts`)."""
        return DecodeRows.build(self._picked, self.input_ids.device)

    @cached_property
    def decode_parts(self) -> tuple[DecodeRows, ...]:
        """The one-token rows split as the state pool reaches them (`StatePool.place`: gathered
        rows, then a block updated in place), in pool rows; placed once per batch, on first use
        (placing moves states between pool rows in every layer at once, so it is safe at any
        point of the forward)."""
        return self.state.place(self._picked, self.input_ids.device)

    @cached_property
    def whole_decode(self) -> DecodeRows | None:
        """The one decode part when it is every row of the batch, in order (a pure decode round
        stepped as one part): a recurrent layer's step output is then the layer's own, with
        nothing to put back. None otherwise."""
        parts = self.decode_parts
        if len(parts) == 1 and parts[0].covers(len(self.input_ids)):
            return parts[0]
        return None

    @cached_property
    def others(self) -> list[int]:
        """Batch indices of the rows that take the per-sequence (chunked) path."""
        batched = set(self.decode_seqs)
        return [i for i in range(len(self.seqs)) if i not in batched]

    @cached_property
    def other_tokens(self) -> torch.Tensor:
        """Flat token indices of the `others` rows, in batch order."""
        return self._tokens_of(self.others)

    def _tokens_of(self, rows: list[int]) -> torch.Tensor:
        """Flat token indices of batch rows ``rows``, in their order."""
        offs, device = self.offsets, self.input_ids.device
        return torch.cat([torch.arange(offs[i], offs[i + 1], device=device) for i in rows])

    @cached_property
    def block_tables(self) -> torch.Tensor:
        """``[seqs, max blocks]`` long: every block table, padded with block 0 (never read: a
        table must cover its sequence's ``[0, end)``, checked here)."""
        for s in self.seqs:
            if len(s.block_table) * self.kv.block_size < s.end:
                blocks = len(s.block_table)
                raise ValueError(f"a block table of {blocks} blocks does not cover position {s.end - 1}")
        width = max(len(s.block_table) for s in self.seqs)
        flat: list[int] = []  # one flat list, then a view: torch reads nested lists slower
        for s in self.seqs:
            flat += s.block_table
            flat += [0] * (width - len(s.block_table))
        return torch.tensor(flat, dtype=torch.long, device=self.input_ids.device).view(len(self.seqs), width)

    def _slots(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """KV-pool slots of absolute ``positions`` of sequences ``rows`` (broadcast together)."""
        size = self.kv.block_size
        return self.block_tables[rows, positions // size] * size + positions % size

    @cached_property
    def context_slots(self) -> dict[int, torch.Tensor]:
        """Per per-sequence row (`others`), the KV-pool slots of positions ``[0, end)``."""
        device = self.input_ids.device
        return {i: self.kv.slots(self.seqs[i].block_table, 0, self.seqs[i].end, device) for i in self.others}

    @cached_property
    def new_slots(self) -> torch.Tensor:
        """KV-pool slots of every token computed this round, in batch order."""
        device = self.input_ids.device
        if len(self.positions) == len(self.seqs):  # one token a row (a decode round): token i is row i's
            return self._slots(torch.arange(len(self.seqs), device=device), self.positions)
        lengths = torch.tensor([s.length for s in self.seqs], device=device)
        rows = torch.repeat_interleave(torch.arange(len(self.seqs), device=device), lengths)
        return self._slots(rows, self.positions)

    @cached_property
    def decode_context(self) -> list[DecodeContext]:
        """The decode rows' attention contexts in groups of similar length (see `DecodeContext`)."""
        device, size, seqs = self.input_ids.device, self.kv.block_size, self.decode_seqs
        ends = [self.seqs[i].end for i in seqs]
        row_tokens = [token for _, token, _, _ in self._picked]  # the rows of `decode`, in order
        out = []
        for group in length_groups(ends):
            group_ends = torch.tensor([ends[j] for j in group], dtype=torch.long, device=device)
            positions = torch.arange(ends[group[0]], device=device)
            valid = positions < group_ends[:, None]
            tables = self.block_tables
            if len(group) != len(tables) or any(seqs[j] != k for k, j in enumerate(group)):
                index = torch.tensor([seqs[j] for j in group], dtype=torch.long, device=device)
                tables = tables.index_select(0, index)
            # every row's slot of every position: the blocks and offsets of one row of positions,
            # read from each row's table (the `_slots` arithmetic, without dividing every row's)
            slots = tables.index_select(1, positions // size) * size + positions % size
            ragged = ends[group[-1]] < ends[group[0]]  # a group is longest first
            if ragged:  # a padded position reads position 0's slot (a valid one), masked out
                slots = slots.where(valid, slots[:, :1])
            flat = [row_tokens[j] for j in group]
            tokens = torch.tensor(flat, dtype=torch.long, device=device)
            out.append(DecodeContext(tokens, slots, valid, group_ends, consecutive(flat), ragged))
        return out

    @cached_property
    def masks(self) -> dict[int, torch.Tensor | None]:
        """Per per-sequence row, the causal mask over its context (None: lower triangle from 0)."""
        device = self.input_ids.device
        return {
            i: None if s.start == 0 else _causal_mask(s.start, s.length, s.end, device)
            for i, s in ((i, self.seqs[i]) for i in self.others)
        }

    @classmethod
    def build(
        cls,
        chunks: list[tuple[list[int], SeqSpec]],
        kv: KVPool,
        state: StatePool,
        device: str,
        batched_decode: bool = True,
        kernels: Kernels = TORCH_KERNELS,
    ) -> ForwardBatch:
        """Pack ``(chunk_token_ids, spec)`` pairs into one batch, its decode steps run by ``kernels``."""
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
            batched_decode=batched_decode,
            kernels=kernels,
        )

    def last_token_indices(self) -> torch.Tensor:
        offs = self.offsets
        return torch.tensor([o - 1 for o in offs[1:]], dtype=torch.long, device=self.input_ids.device)


def _causal_mask(start: int, length: int, end: int, device: torch.device) -> torch.Tensor:
    rows = torch.arange(start, start + length, device=device).unsqueeze(1)
    cols = torch.arange(end, device=device).unsqueeze(0)
    return cols <= rows
