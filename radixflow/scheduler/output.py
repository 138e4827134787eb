"""What one round of scheduling hands to the runner (plain values, no cache internals)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from radixflow.scheduler.sampling import SamplingParams


@dataclass(frozen=True)
class SnapshotSpec:
    position: int  # state after tokens [0, position)
    slot: int
    # the request's own state between its chunks (its working slot, or its rolling decode tail,
    # adopted as a checkpoint only once the request ends): no checkpoint in the cache
    own: bool = False


@dataclass(frozen=True)
class ScheduledChunk:
    """Compute sequence positions ``[start, end)`` of one request this round.

    A prefill chunk covers part of the prompt; a decode chunk is the one position of the token
    sampled last round.
    """

    request_id: str
    namespace: str
    tokens: tuple[int, ...]  # the whole prompt and the tokens generated so far
    start: int
    end: int
    block_table: tuple[int, ...]  # KV blocks covering [0, end)
    restore_slot: int | None  # state after [0, start); None = start from zero state
    snapshots: tuple[SnapshotSpec, ...]
    sample: bool  # end == len(tokens): pick the request's next token this round
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # report the logprobs of prompt positions [prompt_logprobs_from, end) (None: none); on a
    # request's first chunk this starts at 1 and covers positions served from the cache too
    prompt_logprobs_from: int | None = None
    prompt_len: int = 0  # tokens[:prompt_len] are the prompt, the rest were generated

    @property
    def length(self) -> int:
        return self.end - self.start


class StopReason(Enum):
    QUEUE_EMPTY = "queue_empty"  # scanned every waiting request
    BLOCKED = "blocked"  # policy stopped at a blocked consumer
    TOKEN_BUDGET = "token_budget"
    REQUEST_BUDGET = "request_budget"
    MEMORY = "memory"  # KV blocks or state slots could not be reserved
    POLICY = "policy"  # the policy ended the round: more work would cost more than it saves


@dataclass
class SchedulerOutput:
    round_index: int
    chunks: list[ScheduledChunk] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)  # consumers left waiting on a PENDING checkpoint
    stop_reason: StopReason = StopReason.QUEUE_EMPTY
    bubble_tokens: int = 0  # token budget left unused while feasible work waited

    @property
    def tokens(self) -> int:
        return sum(c.length for c in self.chunks)


def waves(chunks: Sequence[ScheduledChunk]) -> list[int]:
    """Each chunk's wave in a runner's recurrent layers: 0, or one more than the wave of the
    earlier chunk of the round that saves the state it restores (a consumer following its
    producer, `ScanAction.FOLLOW`). Pure."""
    saved: dict[int, int] = {}  # slot -> wave of the chunk saving it this round
    out = []
    for chunk in chunks:
        wave = 0 if chunk.restore_slot is None else saved.get(chunk.restore_slot, -1) + 1
        out.append(wave)
        for snap in chunk.snapshots:
            saved.setdefault(snap.slot, wave)
    return out


def round_problem(chunks: Sequence[ScheduledChunk]) -> str | None:
    """Why a round's chunks would corrupt recurrent state (None: they would not): two chunks
    saving one slot (the later would silently win), or a chunk restoring a slot that a later
    chunk of the round saves (what it reads would depend on the runner's order). Pure."""
    saver: dict[int, str] = {}  # slot -> the chunk saving it, in round order
    restored: dict[int, str] = {}  # slot -> the first chunk restoring it
    for chunk in chunks:
        for snap in chunk.snapshots:
            if snap.slot in saver:
                return f"slot {snap.slot} is saved by both {saver[snap.slot]} and {chunk.request_id}"
            reader = restored.get(snap.slot)
            if reader is not None and reader != chunk.request_id:
                return f"{reader} restores slot {snap.slot} before {chunk.request_id} saves it"
            saver[snap.slot] = chunk.request_id
        if chunk.restore_slot is not None:
            restored.setdefault(chunk.restore_slot, chunk.request_id)
    return None
