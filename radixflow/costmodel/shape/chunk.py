"""One scheduled chunk as the cost model sees it: where it starts, how long, what it saves and samples.

Pure data: the runners turn their scheduled chunks into these, and every round cost model prices them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChunkShape:
    """What the cost model needs to know about one scheduled chunk."""

    start: int  # cached prefix length: the chunk computes positions [start, start + length)
    length: int
    sample: bool  # the output projection runs at the chunk's last position
    restores: bool = False  # recurrent state restored from a checkpoint slot
    snapshots: int = 0  # recurrent-state checkpoints written inside the chunk
    # prompt positions whose logits the output head computes for prompt logprobs (beyond the
    # sampled position): every reported position of a prompt-logprob request
    head_rows: int = 0
    # the wave of the round's recurrent layers the chunk runs in: 0, or later for a chunk that
    # restores state an earlier chunk of the same round saves (each wave is one more call of
    # every recurrent layer's kernels)
    wave: int = 0

    @property
    def end(self) -> int:
        return self.start + self.length

    @property
    def decode(self) -> bool:
        """One new position: batched with the other decode steps of a round (costed as one)."""
        return self.length == 1

    @property
    def decode_step(self) -> bool:
        """A decode step of the round's batched decode call: one new position in wave 0 (a row of
        a later wave runs as a prefill row whatever its length)."""
        return self.decode and not self.wave

    @property
    def logit_rows(self) -> int:
        """Positions that go through the output head."""
        return int(self.sample) + self.head_rows
