"""Text from tokens as they arrive, and stop strings found in it.

Decoding a whole sequence after every token costs O(n²); decoding each token alone breaks
characters split over several byte-level tokens and spaces that depend on the token before. So
each new token is decoded inside a short window of the tokens before it, and its text is what the
window's text gained; a token ending inside a UTF-8 character gives no text until one completes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

_INCOMPLETE = "\ufffd"  # what the decoder yields for a partial UTF-8 character
_CONTEXT = 4  # tokens before the window's start, so the first token's leading space is right
# A pending run (tokens whose text is held back) longer than this is settled: its text but for its
# last tokens is handed out, so no token decodes an ever longer run (bytes that never form a
# character kept it pending for good). The text's unfinished character has at most 3 bytes, so
# later tokens change nothing before the last _UNSETTLED tokens but a character straddling them
_PENDING_MAX = 8
_UNSETTLED = 3
_CUTS = 4  # places tried for the cut, from _UNSETTLED tokens back


class Decoder(Protocol):
    def decode(self, ids: list[int] | tuple[int, ...], skip_special_tokens: bool = False) -> str:
        """Text of ``ids``. Pure."""
        ...

    def decode_each(self, ids: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
        """Text of each token decoded on its own, in one call. Pure."""
        ...


class NoText:
    """The decoder of a model without a tokenizer: its requests come as token ids and their
    outputs carry token ids alone, with empty text."""

    def decode(self, ids: list[int] | tuple[int, ...], skip_special_tokens: bool = False) -> str:
        return ""

    def decode_each(self, ids: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
        return [""] * len(ids)


class IncrementalDetokenizer:
    """Feeds tokens one at a time; each `push` returns the text that token added."""

    def __init__(self, decoder: Decoder, skip_special_tokens: bool, context: Sequence[int] = ()) -> None:
        self._decoder, self._skip = decoder, skip_special_tokens
        self._ids = list(context[-_CONTEXT:])
        if self._ids and self._decode(0, len(self._ids)).endswith(_INCOMPLETE):
            # the context ends inside a character (a prompt of token ids): the output's first
            # tokens would complete it, their text taken for the context's and lost
            self._ids = []
        self._prefix = 0  # window start: the text of ids[_prefix:_read] was already handed out
        self._read = len(self._ids)
        self._held = 0  # characters at the end of ids[_prefix:_read]'s text not handed out yet

    def push(self, token: int) -> str:
        self._ids.append(token)
        done = self._decode(self._prefix, self._read)
        handed = len(done) - self._held  # of done's text, what was handed out
        now = self._decode(self._prefix, len(self._ids))
        if len(now) > handed and not now.endswith(_INCOMPLETE):
            self._prefix, self._read, self._held = self._read, len(self._ids), 0
            return now[handed:]
        # nothing yet (a partial character, or a skipped special token)
        if now == done and self._skipped(token):
            # it changes no decoding (the tokenizer drops it first): kept in, it widened the
            # window for good, and a run of them was decoded again on every token
            self._ids.pop()
        elif len(self._ids) - self._read > _PENDING_MAX:
            return self._settle(now, handed)
        return ""

    def _settle(self, now: str, handed: int) -> str:
        """Hands out a long pending run's text up to a cut before its last tokens: the first cut
        whose text starts ``now``, or does but for a last U+FFFD (a character the cut splits,
        held back until a later `push` hands it out whole)."""
        last = len(self._ids) - _UNSETTLED
        for cut in range(last, max(self._read, last - _CUTS), -1):
            head = self._decode(self._prefix, cut)
            held = 0 if now.startswith(head) else 1
            if held and not (head.endswith(_INCOMPLETE) and now.startswith(head[:-1])):
                continue
            if len(head) - held >= handed:
                self._prefix, self._read, self._held = self._read, cut, held
                return head[handed : len(head) - held]
        return ""  # no cut found: the run stays pending

    def _skipped(self, token: int) -> bool:
        """A special token that skip_special_tokens leaves out: text of its own, none when skipped."""
        decode = self._decoder.decode
        return self._skip and decode([token], skip_special_tokens=True) == "" and decode([token]) != ""

    def flush(self) -> str:
        """Text still held back at the end (a partial character shows as U+FFFD)."""
        done = self._decode(self._prefix, self._read)
        now = self._decode(self._prefix, len(self._ids))
        handed, self._held = len(done) - self._held, 0
        self._prefix = self._read = len(self._ids)
        return now[handed:]

    def _decode(self, start: int, end: int) -> str:
        return (
            self._decoder.decode(self._ids[start:end], skip_special_tokens=self._skip) if end > start else ""
        )


def token_texts(decoder: Decoder, tokens: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
    """Each token's share of the text of ``tokens``: joined, they are that text."""
    # Fast path (two tokenizer calls): each token decoded alone, valid when no token splits a
    # character and the pieces add up to the whole (true of byte-level BPE; a tokenizer whose
    # pieces depend on their neighbours fails the check and takes the window path).
    alone = decoder.decode_each(tokens, skip_special_tokens)
    if not any(_INCOMPLETE in t for t in alone) and "".join(alone) == decoder.decode(
        list(tokens), skip_special_tokens
    ):
        return alone
    detok = IncrementalDetokenizer(decoder, skip_special_tokens)
    texts = [detok.push(t) for t in tokens]
    if texts:
        texts[-1] += detok.flush()
    return texts


@dataclass(frozen=True)
class StopHit:
    """A stop string found in a text: where it starts, and which it is."""

    at: int
    stop: str


class StopStrings:
    """Finds the earliest stop string in a growing text, searching only where a new one can be."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(stops)
        self.longest = max((len(s) for s in self.stops), default=0)  # a search reads this far back

    def find(self, text: str, new_from: int) -> int | None:
        """Where the first stop string that ends past ``new_from`` starts in ``text`` (None: none)."""
        hit = self.first(text, new_from)
        return None if hit is None else hit.at

    def first(self, text: str, new_from: int) -> StopHit | None:
        """The first stop string in ``text`` that ends past ``new_from`` (the text before it was
        searched already, or may not stop the request yet: ``min_tokens``): the earliest start,
        the first listed of those starting there."""
        # each string from where it would end just past new_from: a shorter one wholly before
        # new_from is not in its window. Only the best hit is built: a request may list many
        # thousands of stop strings, searched on every token
        best, stop = len(text), None
        for s in self.stops:  # only a start before the best so far: a tie keeps the first listed
            at = text.find(s, max(0, new_from - len(s) + 1), best + len(s) - 1)
            if at != -1:
                best, stop = at, s
        return None if stop is None else StopHit(best, stop)

    def held_back(self, text: str) -> int:
        """Characters at the end of ``text`` that may be the start of a stop string (not yet safe
        to stream): the longest tail, under the longest stop string, that one starts with.

        Only tails that begin with a stop string's first character are compared (found by
        ``str.find``): comparing every tail cost time quadratic in the text for each new token."""
        start = max(len(text) - self.longest + 1, 0)
        return max((self._held_for(stop, text, start) for stop in self.stops), default=0)

    @staticmethod
    def _held_for(stop: str, text: str, start: int) -> int:
        if not stop:  # refused by every door; it starts no tail
            return 0
        at = text.find(stop[0], start)
        while at != -1:
            if stop.startswith(text[at:]):  # the earliest is the longest tail
                return len(text) - at
            at = text.find(stop[0], at + 1)
        return 0
