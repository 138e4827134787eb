"""What a runner choice answers before anything is built: the protocol every choice follows, and
the capacity and entry sizes it reports (the options' budget and the engine read them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from radixflow.engine.runner import Runner
from radixflow.problems import Problem
from radixflow.scheduler.config import SchedulerConfig


@dataclass(frozen=True)
class Capacity:
    kv_blocks: int
    state_slots: int


@dataclass(frozen=True)
class EntryBytes:
    """One KV block (every attention layer, ``block_size`` tokens) and one state slot (every
    recurrent layer's state; 0 for a full-attention model), in bytes."""

    block: int
    slot: int


class RunnerChoice(Protocol):
    name: str
    label: str  # the model as the user named it
    checkpoint: Path | None  # the model's directory (None: a sim shape, no weights)

    @property
    def vocab_size(self) -> int:
        """Vocabulary of the chosen model (workloads draw token ids below it). Pure."""
        ...

    @property
    def has_recurrent(self) -> bool:
        """Whether the model has recurrent layers (a full-attention model needs no state slots). Pure."""
        ...

    def capacity(self, prompt_lengths: Sequence[int] | None, block_size: int) -> Capacity:
        """Default cache capacity for prompts of these lengths (None: a server's open-ended
        stream). Pure."""
        ...

    def memory_problem(self, scheduler: SchedulerConfig) -> Problem | None:
        """Why the runner's pools for this capacity cannot fit this machine (None: they can). Pure."""
        ...

    def entry_bytes(self, block_size: int) -> EntryBytes:
        """What one KV block and one state slot take in the runner's pools. Pure."""
        ...

    def build(self, scheduler: SchedulerConfig) -> Runner:
        """Construct the runner (reads model weights, allocates its pools)."""
        ...

    def describe(self, runner: Runner) -> dict[str, object]:
        """Runner settings to record beside the results: what ``runner`` (built by this choice)
        runs with, an option's ``auto`` resolved."""
        ...

    @property
    def fixed_cost_ms(self) -> float | None:
        """The modelled fixed cost of one worker call in ms (None: a real runner pays what it pays)."""
        ...
