"""What generation hands back per prompt (the offline API's result and the server's source)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from radixflow.scheduler.samples import PromptLogprobs


@dataclass(frozen=True)
class TokenLogprob:
    """One token, its share of the text, its logprob and the most likely tokens there (best
    first); ``rank``: 1 + how many tokens the model found likelier (None where not computed:
    generated tokens)."""

    token: int
    text: str
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    rank: int | None = None


class PromptTokenLogprobs(Sequence[TokenLogprob | None]):
    """A prompt's logprobs: one entry per prompt token, None where there is none (the first
    token, which nothing precedes), built on access from the runner's columns (``scored``).

    The token texts are detokenized by the first access that needs one; a reader that needs no
    text (the server's echo, which has its own) reads ``scored`` through `row` and builds
    nothing per position."""

    def __init__(
        self, prompt: Sequence[int], scored: PromptLogprobs, texts: Callable[[], Sequence[str]]
    ) -> None:
        self.prompt, self.scored = prompt, scored
        self._texts_of, self._texts = texts, None
        positions = scored.positions
        first = positions[0] if positions else 0
        contiguous = positions == list(range(first, first + len(positions)))
        self._first = first if contiguous else None
        self._rows = None if contiguous else {p: i for i, p in enumerate(positions)}

    def row(self, position: int) -> int | None:
        """Index of ``position`` in ``scored``'s columns (None: not scored)."""
        if self._rows is not None:
            return self._rows.get(position)
        assert self._first is not None
        i = position - self._first
        return i if 0 <= i < len(self.scored) else None

    def __len__(self) -> int:
        return len(self.prompt)

    @overload
    def __getitem__(self, i: int) -> TokenLogprob | None: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[TokenLogprob | None, ...]: ...
    def __getitem__(self, i: int | slice) -> TokenLogprob | tuple[TokenLogprob | None, ...] | None:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        position = range(len(self))[i]  # negative indices, and IndexError past the end
        row = self.row(position)
        if row is None:
            return None
        if self._texts is None:
            self._texts = self._texts_of()
        s = self.scored
        top = tuple(zip(s.top_ids[row], s.top_logprobs[row], strict=True))
        return TokenLogprob(self.prompt[position], self._texts[position], s.logprobs[row], top, s.rank(row))

    def __iter__(self) -> Iterator[TokenLogprob | None]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        # a read-only value once handed out (the runner's columns are complete by then), so the
        # frozen outputs holding it hash too; as the tuple it equals (builds every entry)
        return hash(tuple(self))

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its texts, made now if no access has made them, and not with their maker
        (a partial over the tokenizer: megabytes at a large vocabulary, in every output)."""
        if self._texts is None and self.scored.positions:
            self._texts = self._texts_of()
        return {**self.__dict__, "_texts_of": _no_texts}

    def __repr__(self) -> str:
        return f"PromptTokenLogprobs({len(self)} tokens, {len(self.scored)} scored)"


def _no_texts() -> Sequence[str]:
    """The texts' maker of an unpickled `PromptTokenLogprobs`: its texts came with it (or it has
    no scored position, so none is ever asked for)."""
    return ()


@dataclass(frozen=True)
class GenerationOutput:
    """Everything generated for one prompt.

    ``token_ids`` are all generated tokens (an end-of-sequence token that ended the request
    included); ``text`` is their text, special tokens left out unless asked for, cut before a stop
    string, without the text of a stop or EOS token that ended it (as vLLM; both kept with
    ``include_stop_str_in_output``). ``logprobs`` has one entry per generated token when asked
    for (texts joined give ``text``); ``prompt_logprobs`` one per prompt token, the first None
    (nothing precedes it). ``cached_tokens``: prompt tokens served from the prefix cache.
    ``choice``: which of the prompt's ``n`` choices this is (`SamplingParams.n`; 0 when there is
    one).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # "stop" (EOS, stop token or stop string) or "length" (max_tokens)
    logprobs: tuple[TokenLogprob, ...] | None = None
    prompt_logprobs: PromptTokenLogprobs | None = None
    cached_tokens: int = 0
    stop_string: str | None = None  # the stop string that ended it, if one did
    choice: int = 0
    stop_token: int | None = None  # the token of ``stop_token_ids`` that ended it, if one did

    @property
    def stop_reason(self) -> str | int | None:
        """vLLM's ``stop_reason``: the stop string or stop token id that ended the output; None
        when it ended otherwise (``max_tokens``, the model's end-of-sequence token, a guided
        choice completed), so ``finish_reason`` "stop" with None here is an EOS."""
        return self.stop_string if self.stop_string is not None else self.stop_token


@dataclass(frozen=True)
class StreamDelta:
    """What a request gained since the last delta: tokens, text safe to show, their logprobs."""

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None
    # on the first delta once the prompt is computed, when prompt logprobs were asked for
    prompt_logprobs: PromptTokenLogprobs | None = None
