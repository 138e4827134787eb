"""One sequence of a round's packed batch (`SeqSpec`: one request's chunk) and the points its
recurrent state is saved at (`Snapshot`), cut into the segments a recurrent layer runs
(`Segment`). Plain data: what a round computes, before any tensor."""

from __future__ import annotations

from dataclasses import dataclass, field


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


# where a wave's scan saves a state: (sequence in the wave, tokens of it before, slots)
SaveAt = tuple[int, int, tuple[int, ...]]


def wave_segments(seqs: list[SeqSpec]) -> tuple[list[list[tuple[int, int, int | None]]], list[SaveAt]]:
    """A wave's segments as a recurrent scan takes them: per sequence its ``(lo, hi, key)`` rows
    of the wave's packed tokens (the sequences one after another), ``key`` indexing the saves
    (None: the segment saves nothing); and per key where the state goes."""
    saves: list[SaveAt] = []
    segs, base = [], 0
    for n, seq in enumerate(seqs):
        mine: list[tuple[int, int, int | None]] = []
        for seg in seq.segments():
            key = None
            if seg.slots:
                key = len(saves)
                saves.append((n, seg.hi, seg.slots))
            mine.append((base + seg.lo, base + seg.hi, key))
        segs.append(mine)
        base += seq.length
    return segs, saves
