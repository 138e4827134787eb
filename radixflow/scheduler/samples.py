"""What comes back of a request's generation: each generated token (`Sample`), the prompt's
logprobs (`PromptLogprob`, as columns: `PromptLogprobs`) and why it finished (`FinishReason`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import overload


class FinishReason(Enum):
    STOP = "stop"  # an end-of-sequence or stop token, or a stop string seen by the caller
    LENGTH = "length"  # max_tokens generated


@dataclass(frozen=True)
class Sample:
    """A generated token with its logprob and the most likely alternatives (best first)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class PromptLogprob:
    """Logprob of the prompt token at ``position`` given the tokens before it, and the top ones."""

    position: int
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    rank: int | None = None  # 1 + how many tokens the model found likelier there


@dataclass
class PromptLogprobs(Sequence[PromptLogprob]):
    """Prompt logprobs as columns: row ``i`` scores the prompt token at ``positions[i]``.

    The runner fills the columns from its tensors in one conversion per round and the scheduler
    appends them (`extend`); a reader that wants columns (the server's echo) builds no object
    per position. Read as a sequence, it is the `PromptLogprob` of each row, built on access."""

    positions: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)  # per row, the best first
    top_logprobs: list[list[float]] = field(default_factory=list)
    # per row, the token's rank (None, or missing at the end: a runner that ranks nothing)
    ranks: list[int | None] = field(default_factory=list)

    def extend(self, more: PromptLogprobs) -> None:
        """Append ``more``'s rows (mutates this one). Rows appended unranked stand as None
        wherever ranked rows follow them, so each row keeps its own rank."""
        if more.ranks:
            self.ranks.extend([None] * (len(self) - len(self.ranks)))
        self.positions.extend(more.positions)
        self.tokens.extend(more.tokens)
        self.logprobs.extend(more.logprobs)
        self.top_ids.extend(more.top_ids)
        self.top_logprobs.extend(more.top_logprobs)
        self.ranks.extend(more.ranks[: len(more)])

    def rank(self, i: int) -> int | None:
        """Row ``i``'s rank (None where the producer did not rank its rows)."""
        i = range(len(self))[i]  # a negative index counts from the end of the rows
        return self.ranks[i] if i < len(self.ranks) else None

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, i: int) -> PromptLogprob: ...
    @overload
    def __getitem__(self, i: slice) -> list[PromptLogprob]: ...
    def __getitem__(self, i: int | slice) -> PromptLogprob | list[PromptLogprob]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        top = tuple(zip(self.top_ids[i], self.top_logprobs[i], strict=True))
        return PromptLogprob(self.positions[i], self.tokens[i], self.logprobs[i], top, self.rank(i))

    def __iter__(self) -> Iterator[PromptLogprob]:
        return (self[i] for i in range(len(self)))
