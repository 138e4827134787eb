"""The request: what the user asked for, plus the scheduler's bookkeeping for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from radixflow.cache.types import NodeHandle
from radixflow.scheduler.samples import FinishReason, PromptLogprobs, Sample
from radixflow.scheduler.sampling import SamplingParams

# Seconds from the run's start, in a trace, generated or given to an engine: past 2**32 s (136
# years) a float's step passes a µs, so a round's start and end (and a request's arrival and
# finish) blur together: latencies came out 0 and a dependency trace's µs overflowed. Seconds
# since the epoch fit (the run waits until then); the epoch in ms or ns does not.
MAX_ARRIVAL_S = 2**32


class RequestStatus(Enum):
    WAITING = "waiting"  # arrived, not yet admitted
    RUNNING = "running"  # admitted: prefilling (possibly chunked) or decoding
    FINISHED = "finished"
    FAILED = "failed"  # rejected, or its round's worker call failed (see ``error``)
    ABORTED = "aborted"  # cancelled by the caller (`Engine.abort`)

    @property
    def done(self) -> bool:
        return self in (RequestStatus.FINISHED, RequestStatus.FAILED, RequestStatus.ABORTED)


# frozen, so one serves every request given none: making one per request (its numbers made
# plain) was most of what reading a long trace cost
DEFAULT_SAMPLING = SamplingParams()


@dataclass(eq=False)
class Request:
    id: str
    prompt: tuple[int, ...]
    namespace: str = "default"
    arrival_s: float = 0.0
    sampling: SamplingParams = DEFAULT_SAMPLING

    # Scheduler-owned state. Invariant: reused <= computed <= len(prompt) + len(output) - 1 once
    # decoding (the last sampled token is fed next round); block_table covers [0, computed)
    # rounded up to whole blocks.
    status: RequestStatus = RequestStatus.WAITING
    # taken by an engine's submit: one object runs in one engine (its status and registration say
    # nothing until it is admitted, and a second engine would share every field after)
    submitted: bool = False
    reused: int = 0  # prompt tokens served from the cache at admission
    computed: int = 0  # sequence positions whose KV (and state) exist
    # Dependency depth: fewest rounds before this request's token could exist, given where its
    # reused state came from (depth_base: rounds before that checkpoint could exist).
    depth_base: int = 0
    depth: int = 0
    block_table: list[int] = field(default_factory=list)
    own_blocks: list[int] = field(default_factory=list)
    working_slot: int | None = None  # state after [0, computed) between chunks and decode steps
    tail_slot: int | None = None  # decoding: state at ``tail_position``, a checkpoint when it ends
    tail_position: int = 0
    registration: NodeHandle | None = None
    lock: NodeHandle | None = None
    chunks: int = 0
    output: list[int] = field(default_factory=list)
    output_logprobs: list[Sample] = field(default_factory=list)
    prompt_logprobs: PromptLogprobs = field(default_factory=PromptLogprobs)
    finish_reason: FinishReason | None = None
    # its last output token ended it: a stop token or an end-of-sequence one (whose text a door
    # leaves out, as vLLM does); only the scheduler knows which tokens the model's EOS are
    stopped_by_token: bool = False
    first_token_s: float | None = None
    finish_s: float | None = None
    error: str | None = None

    @property
    def sequence(self) -> tuple[int, ...]:
        """Prompt and the tokens generated so far."""
        return self.prompt + tuple(self.output)

    @property
    def max_length(self) -> int:
        """Positions whose KV this request may need: the prompt plus all but the last token."""
        return len(self.prompt) + max(self.sampling.max_tokens - 1, 0)

    @property
    def prefilled(self) -> bool:
        return self.computed >= len(self.prompt)

    @property
    def latency_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s
