"""The one-token rows of a packed batch, and how their attention contexts are grouped.

A decode round's rows each compute one token. `DecodeRows` holds the index tensors every layer
needs to run them in one batched step (which token, which state slot to gather, which slots to
scatter the new state into); `DecodeContext` is one group of rows attending together over
padded paged-KV contexts, formed by `length_groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

# One one-token row as `DecodeRows.build` takes it: (batch index, flat token index, restore slot
# or None, snapshot slots).
Picked = tuple[int, int, int | None, tuple[int, ...]]


@dataclass(frozen=True)
class DecodeRows:
    """The one-token sequences of a batch, run by one batched step per layer.

    Every index tensor is built once per batch, on first use, and shared by all layers: a
    usual decode round reads none of them (its rows are consecutive tokens, `span`, and update
    their states in place, `block`), and building five small tensors costs ~25 us a round. A
    one-token chunk's snapshots all sit at its end, so each row saves one state into zero or
    more slots.
    """

    seqs: tuple[int, ...]  # batch indices of the rows, in batch order
    token_ids: tuple[int, ...]  # flat token index of each row (`tokens` as a tensor)
    restores: tuple[int | None, ...]  # slot each row gathers, None: fresh (`restore`, `fresh`)
    saves: tuple[tuple[int, int], ...]  # (row, slot) of each save
    device: torch.device | str
    # first pool row of a block the rows update in place (row i in pool row block + i; `saves`
    # then lists only the extra slots); None: the states are gathered and scattered
    block: int | None = None
    span: slice | None = None  # `tokens` as a slice when they are consecutive (see `take`)

    def __len__(self) -> int:
        return len(self.seqs)

    def _longs(self, values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)

    @cached_property
    def tokens(self) -> torch.Tensor:
        """``[S]`` long: flat token index of each row."""
        return self._longs(list(self.token_ids))

    @cached_property
    def restore(self) -> torch.Tensor | None:
        """``[S]`` long: slot to gather (0 for fresh rows); None: all fresh."""
        if all(r is None for r in self.restores):
            return None
        return self._longs([0 if r is None else r for r in self.restores])

    @cached_property
    def fresh(self) -> torch.Tensor | None:
        """``[S]`` bool: rows starting from zero state; None: none do (or all do: `restore`)."""
        fresh = [r is None for r in self.restores]
        return torch.tensor(fresh, device=self.device) if any(fresh) and not all(fresh) else None

    @cached_property
    def save_rows(self) -> torch.Tensor | None:
        """``[N]`` long: row of each save; None: one save per row, in order (the usual decode
        round, each row saving its working slot only: no reordering)."""
        rows = [j for j, _ in self.saves]
        return None if rows == list(range(len(self.seqs))) else self._longs(rows)

    @cached_property
    def save_slots(self) -> torch.Tensor:
        """``[N]`` long: slot of each save."""
        return self._longs([slot for _, slot in self.saves])

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """The rows' entries of ``t`` (indexed by flat token): a view when they are consecutive."""
        return t[self.span] if self.span is not None else t[self.tokens]

    def put(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Write ``src`` (one entry per row) into the rows' entries of ``dst`` (mutates ``dst``)."""
        if self.span is not None:
            dst[self.span] = src
        else:
            dst[self.tokens] = src

    def covers(self, tokens: int) -> bool:
        """Whether the rows are all ``tokens`` of the batch, in order (`ForwardBatch.whole_decode`)."""
        return self.span == slice(0, tokens)

    @classmethod
    def build(cls, picked: list[Picked], device: torch.device | str, block: int | None = None) -> DecodeRows:
        """Rows from ``(batch index, flat token index, restore slot or None, snapshot slots)``
        of each one-token sequence, in batch order (in block order for a ``block``)."""
        tokens = [token for _, token, _, _ in picked]
        return cls(
            seqs=tuple([i for i, _, _, _ in picked]),
            token_ids=tuple(tokens),
            restores=tuple([restore for _, _, restore, _ in picked]),
            saves=tuple([(j, slot) for j, (_, _, _, slots) in enumerate(picked) for slot in slots]),
            device=device,
            block=block,
            span=consecutive(tokens),
        )


@dataclass(frozen=True)
class DecodeContext:
    """Decode rows attending together: their KV-pool slots of positions ``[0, end)``, padded
    (with valid slots, masked out) to the group's longest context."""

    tokens: torch.Tensor  # [G] long: flat token index of each row
    slots: torch.Tensor  # [G, longest] long
    valid: torch.Tensor  # [G, longest] bool: position < the row's end
    ends: torch.Tensor  # [G] long: each row's context length (its first `ends` slots are valid)
    span: slice | None = None  # `tokens` as a slice when they are consecutive
    ragged: bool = True  # some row's context is shorter than the group's longest (mask needed)

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """The rows' entries of ``t`` (indexed by flat token): a view when they are consecutive."""
        return take(t, self.tokens, self.span)

    def put(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Write ``src`` (one entry per row) into the rows' entries of ``dst`` (mutates ``dst``)."""
        put(dst, self.tokens, self.span, src)

    def covers(self, tokens: int) -> bool:
        """Whether the rows are all ``tokens`` of the batch, in order (a pure decode round in one
        group): a step's output is then the layer's own, with nothing to put back."""
        return self.span == slice(0, tokens)


def consecutive(values: list[int]) -> slice | None:
    """``values`` as a slice when they are ascending consecutive integers (None otherwise)."""
    if values and values == list(range(values[0], values[0] + len(values))):
        return slice(values[0], values[0] + len(values))
    return None


def take(t: torch.Tensor, index: torch.Tensor, span: slice | None) -> torch.Tensor:
    """``t[index]``, as the view ``t[span]`` when ``span`` says the index is one run: a decode
    round's rows are usually the batch's tokens in order, and a view copies nothing."""
    return t[span] if span is not None else t[index]


def put(dst: torch.Tensor, index: torch.Tensor, span: slice | None, src: torch.Tensor) -> None:
    """``dst[index] = src``, as a plain copy into ``dst[span]`` when ``span`` is given."""
    if span is not None:
        dst[span] = src
    else:
        dst[index] = src


def length_groups(ends: list[int], waste: float = 2.0) -> list[list[int]]:
    """Indices of ``ends`` grouped longest first, so that padding every row of a group to its
    longest costs at most ``waste`` times the group's real context (one row with a long context
    among short ones must not blow up every row's gather)."""
    order = sorted(range(len(ends)), key=lambda j: -ends[j])
    groups: list[list[int]] = []
    total = 0
    for j in order:
        if groups and (len(groups[-1]) + 1) * ends[groups[-1][0]] <= waste * (total + ends[j]):
            groups[-1].append(j)
            total += ends[j]
        else:
            groups.append([j])
            total = ends[j]
    return groups
