"""The recurrent-state pool: checkpoints and working states, one row per slot and layer.

The scheduler names states by *slot*; the pool stores slot ``s`` in *row* ``rows[s]`` of each
layer's tensors (a permutation, identity until a decode round rearranges it). The indirection
exists for the decode step: a decode row that restores its own working slot and saves the new
state back into it can update that state where it lies, with no gather into a scratch buffer and
no scatter back (on qwen3_5-small at 32 rows those two copies cost as much as the delta-rule step
itself). The batched step needs those rows to be one contiguous block, so `place` moves the few
states that are not yet in the block into it (a swap of rows, once per change of the decoding
set: a finished request leaves one hole, filled by one swap) and hands the rows over in block
order. Everything else (`load`, `save`, `copy_slot`, `gather`/`scatter` of the other rows) goes
through the same mapping, so a slot's meaning never changes.
"""

from __future__ import annotations

from collections import Counter

import torch

from radixflow.models.decode_rows import DecodeRows, Picked
from radixflow.models.pool_memory import pool_zeros

# Rows of at least this size are scattered one plain copy each: on CPU the index-copy kernel moves
# large rows at about half the speed of a memcpy (a Mamba2 row is 256 KiB at 16 heads of 64 x 64).
ROW_COPY_BYTES = 64 * 1024


class StatePool:
    """Recurrent-state checkpoints: for each recurrent layer a tuple of ``[num_slots, *shape]``
    (indexed by pool row; `logical` gives them indexed by slot)."""

    def __init__(
        self,
        layout: dict[int, tuple[tuple[int, ...], ...]],
        num_slots: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        self.num_slots = num_slots
        self.tensors: dict[int, tuple[torch.Tensor, ...]] = {
            layer: tuple(pool_zeros((num_slots, *s), dtype, device) for s in shapes)
            for layer, shapes in layout.items()
        }
        self.rows = list(range(num_slots))  # slot -> pool row
        self._slot_of = list(range(num_slots))  # pool row -> slot
        # gather's output buffers (per tensor position and row shape), reused layer after layer:
        # a fresh multi-megabyte tensor per layer costs page faults that show in the decode step
        self._scratch: dict[tuple[int, torch.Size], torch.Tensor] = {}

    def load(self, layer: int, slot: int | None) -> tuple[torch.Tensor, ...] | None:
        """The state in ``slot``, read where it lies: views of the pool, valid until that slot is
        next written (None when starting from scratch). For a kernel that leaves its initial
        state alone and reads it before it saves anything: no copy out of the pool."""
        if slot is None:
            return None
        return tuple(t[self.rows[slot]] for t in self.tensors[layer])

    def load_many(self, layer: int, slots: list[int | None]) -> tuple[torch.Tensor, ...]:
        """Copies of the states in ``slots``, ``[len(slots), *shape]`` per tensor, in one index op
        per tensor (zeros where a slot is None: starting from scratch)."""
        tensors = self.tensors[layer]
        fresh = [i for i, s in enumerate(slots) if s is None]
        if len(fresh) == len(slots):
            return tuple(t.new_zeros(len(slots), *t.shape[1:]) for t in tensors)
        device = tensors[0].device
        rows = [0 if s is None else self.rows[s] for s in slots]
        index = torch.tensor(rows, dtype=torch.long, device=device)
        out = tuple(t.index_select(0, index) for t in tensors)
        if fresh:
            for t in out:
                t[fresh] = 0
        return out

    def save(self, layer: int, slot: int, state: tuple[torch.Tensor, ...]) -> None:
        """Overwrite ``slot`` of ``layer`` with ``state`` (mutates the pool)."""
        for dst, src in zip(self.tensors[layer], state, strict=True):
            dst[self.rows[slot]].copy_(src)

    def copy_slot(self, src: int, dst: int) -> None:
        for tensors in self.tensors.values():
            for t in tensors:
                t[self.rows[dst]].copy_(t[self.rows[src]])

    def logical(self, layer: int) -> tuple[torch.Tensor, ...]:
        """Copies of ``layer``'s tensors indexed by slot (for inspection; the decode path never
        needs them)."""
        order = torch.tensor(self.rows, dtype=torch.long)
        return tuple(t.index_select(0, order.to(t.device)) for t in self.tensors[layer])

    def place(self, picked: list[Picked], device: torch.device) -> tuple[DecodeRows, ...]:
        """The decode rows of one round (``(batch index, token index, restore slot or None,
        snapshot slots)``, as `DecodeRows.build` takes them), split into at most two parts in
        pool rows: the rows gathered into scratch, then the rows updated in place (a block).

        A row is updated in place when it restores a slot it also saves into and no other row
        of the round touches that slot: its old state is then read by this row alone, before
        the row's step overwrites it, so changing it early changes nothing anyone reads. Moves
        those states into one contiguous block (mutates the pool's row order, never a slot's
        state); call it before the round's first layer reads or writes a state.
        """
        uses = Counter(s for _, _, r, snaps in picked for s in ((r,) if r is not None else ()) + snaps)
        own = [p for p in picked if p[2] is not None and p[2] in p[3] and uses[p[2]] == 2]
        mine = {p[0] for p in own}
        rest = [p for p in picked if p[0] not in mine]
        parts = []
        start = self._arrange([p[2] for p in own]) if own else 0  # first: it moves slots' rows
        if rest:
            parts.append(DecodeRows.build([self._to_rows(p) for p in rest], device))
        if own:
            own.sort(key=lambda p: self.rows[p[2]])
            # the usual row saves its own slot only (no extra slots): no tuple to rebuild
            extra = [(i, tok, r, () if snaps == (r,) else _without(snaps, r)) for i, tok, r, snaps in own]
            parts.append(DecodeRows.build([self._to_rows(p) for p in extra], device, block=start))
        return tuple(parts)

    def _to_rows(self, p: Picked) -> Picked:
        i, tok, restore, snaps = p
        rows = self.rows
        saves = tuple([rows[s] for s in snaps]) if snaps else ()
        return i, tok, None if restore is None else rows[restore], saves

    def _arrange(self, slots: list[int]) -> int:
        """Move ``slots``' states into one block of consecutive pool rows, moving as few as
        possible (mutates the row order); returns the block's first row."""
        n = len(slots)
        where = sorted(self.rows[s] for s in slots)
        start = min(where[0], self.num_slots - n)
        inside = {r for r in where if start <= r < start + n}
        holes = [r for r in range(start, start + n) if r not in inside]
        movers = [r for r in where if r not in inside]
        if movers:
            self._swap(movers, holes)
        return start

    def _swap(self, a: list[int], b: list[int]) -> None:
        """Exchange pool rows ``a[i]`` and ``b[i]`` in every layer, with the slots they hold."""
        src = torch.tensor(a + b, dtype=torch.long)
        dst = torch.tensor(b + a, dtype=torch.long)
        pool = [t for tensors in self.tensors.values() for t in tensors]
        # every layer's rows read out (what allocates, so what may fail) before any is written: a
        # swap that fails leaves every layer and the slot map as they were, not half swapped
        where = {t.device: (src.to(t.device), dst.to(t.device)) for t in pool}
        moved = [t.index_select(0, where[t.device][0]) for t in pool]
        for t, rows in zip(pool, moved, strict=True):
            t.index_copy_(0, where[t.device][1], rows)
        for x, y in zip(a, b, strict=True):
            sx, sy = self._slot_of[x], self._slot_of[y]
            self._slot_of[x], self._slot_of[y] = sy, sx
            self.rows[sx], self.rows[sy] = y, x

    def gather(self, layer: int, rows: DecodeRows) -> tuple[torch.Tensor, ...]:
        """The state every decode row restores, ``[rows, *shape]`` per tensor in the pool's dtype
        (zeros for rows starting from scratch). ``rows`` are in pool rows (from `place`, or any
        `DecodeRows` on a pool whose order `place` never changed).

        For an in-place block these are views of the pool itself; otherwise scratch buffers the
        caller may update in place, valid until the next ``gather`` (which reuses them), so a
        layer scatters its new state before the next layer gathers.
        """
        if rows.block is not None:
            return tuple(t[rows.block : rows.block + len(rows)] for t in self.tensors[layer])
        out = []
        for j, t in enumerate(self.tensors[layer]):
            key = (j, t.shape[1:])
            buf = self._scratch.get(key)
            if buf is None or buf.shape[0] < len(rows):  # grown to the largest batch seen
                buf = self._scratch[key] = torch.empty(len(rows), *key[1], dtype=t.dtype, device=t.device)
            buf = buf[: len(rows)]
            if rows.restore is None:
                buf.zero_()
            else:
                torch.index_select(t, 0, rows.restore, out=buf)
                if rows.fresh is not None:
                    buf[rows.fresh] = 0
            out.append(buf)
        return tuple(out)

    def scatter(self, layer: int, rows: DecodeRows, state: tuple[torch.Tensor, ...]) -> None:
        """Write row ``i``'s new state (``state[j][i]``) into every slot row ``i`` snapshots
        (mutates the pool; rows without snapshots write nothing). An in-place block first takes
        the new state where the step did not already write it there."""
        if rows.block is not None:
            self._commit_block(layer, rows, state)
            return
        if not rows.saves:
            return
        for dst, src in zip(self.tensors[layer], state, strict=True):
            if src[0].nbytes >= ROW_COPY_BYTES:
                for row, slot in rows.saves:
                    dst[slot].copy_(src[row])
                continue
            if rows.save_rows is not None:
                src = src.index_select(0, rows.save_rows)
            dst.index_copy_(0, rows.save_slots, src.to(dst.dtype))

    def _commit_block(self, layer: int, rows: DecodeRows, state: tuple[torch.Tensor, ...]) -> None:
        """The new state into an in-place block (where the step did not write it there already),
        then copies into the rows' extra slots: rows outside the block, copied one by one (an
        index copy refuses a source that shares the destination's memory)."""
        for dst, new in zip(self.tensors[layer], state, strict=True):
            start = dst.data_ptr() + rows.block * dst.stride(0) * dst.element_size()
            if new.data_ptr() == start and not rows.saves:
                continue  # the step wrote the block where it lies (the usual round): no view to build
            view = dst[rows.block : rows.block + len(rows)]
            if new.data_ptr() != start:
                view.copy_(new)
            for row, slot in rows.saves:
                dst[slot].copy_(view[row])


def _without(slots: tuple[int, ...], slot: int) -> tuple[int, ...]:
    """``slots`` less every ``slot``."""
    return tuple([s for s in slots if s != slot])
