"""`sim_token`'s hash without rehashing a shared prefix: the sim runner's token is the SHA-256 of
``"namespace|t0,t1,...,tn-1"``, so hashing each sequence from scratch costs O(n) string work per
sampled token, O(n^2) over a decoded request and once per candidate over a shared context.

`PrefixHashes` keeps the hash state after each whole block of ``BLOCK`` tokens, keyed by the state
before it and the block's tokens (a trie over blocks), and resumes from the deepest one it holds:
the digest is that of the same bytes fed in the same order, so the token is `sim_token`'s exactly.
The states are bounded (least recently used dropped first), one store per sim runner, behind a
lock (a runner whose engine is stepped from another thread than the one that built it).

A decode step hashes its sequence one token longer than the step before: the state after each
sequence hashed is kept too (`_Ends`), found by its last tokens and checked whole, so the next
step feeds only its new token, neither walking the blocks nor rejoining the tail.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

BLOCK = 64  # tokens between two kept states: a walk steps n / BLOCK blocks, a tail joins < BLOCK
# kept states at most, each about 1 KB (its block's key tuple, the state, the index entry): a few MB
CAPACITY = 1 << 13
# tokens of the sequences whose end states are kept, at most (8 bytes each: 16 MB), and how many
# of their last tokens find one (a key, not a proof: the whole sequence is compared)
END_TOKENS, END_KEY = 1 << 21, 8

_Key = tuple[int, Any]  # (0, namespace) for a namespace's first state; (state id, block) after it
_State = tuple[int, Any]  # (state id, hashlib state after it: never updated once kept)


class PrefixHashes:
    """SHA-256 digests of ``"namespace|t0,t1,..."`` from cached states of their block prefixes."""

    def __init__(self, block: int = BLOCK, capacity: int = CAPACITY, end_tokens: int = END_TOKENS) -> None:
        self.block, self.capacity, self.end_tokens = block, capacity, end_tokens
        self._states: OrderedDict[_Key, _State] = OrderedDict()
        self._next_id = 1
        self._ends = _Ends(end_tokens)
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[type[PrefixHashes], tuple[int, int, int]]:
        # a copy (a deep-copied runner: the twin's replays) or a pickle starts empty: the states
        # are a cache (hashlib's cannot be copied across, nor the lock), the tokens are the same
        return PrefixHashes, (self.block, self.capacity, self.end_tokens)

    def token(self, namespace: str, tokens: Sequence[int], vocab_size: int) -> int:
        """`sim_token` (``sim.py``) of ``namespace`` and ``tokens``."""
        return int.from_bytes(self.digest(namespace, tokens)[:8], "little") % vocab_size

    def digest(self, namespace: str, tokens: Sequence[int]) -> bytes:
        tokens = tuple(tokens)
        with self._lock:
            before = self._ends.pop(namespace, tokens[:-1]) if len(tokens) > 1 else None
        if before is not None:  # the sequence one token shorter was hashed last: feed its new token
            state = before.copy()
            state.update(_text(tokens[-1:], False))
        else:
            state = self._walk(namespace, tokens)
        with self._lock:
            self._ends.keep(namespace, tokens, state)  # never updated once kept: copied first
        return state.digest()

    def _walk(self, namespace: str, tokens: tuple[int, ...]) -> Any:
        """The hash state after ``tokens``, resumed from the deepest kept state of their whole
        blocks (kept as the walk passes them)."""
        b = self.block
        whole = len(tokens) // b * b
        with self._lock:
            state = self._kept((0, namespace)) or self._keep((0, namespace), None, namespace)
            for at in range(0, whole, b):
                block = tokens[at : at + b]
                key = (state[0], block)
                state = self._kept(key) or self._keep(key, state[1], _text(block, at == 0))
        tail = state[1].copy()
        tail.update(_text(tokens[whole:], whole == 0))
        return tail

    def __len__(self) -> int:
        return len(self._states)

    def _kept(self, key: _Key) -> _State | None:
        found = self._states.get(key)
        if found is not None:
            self._states.move_to_end(key)
        return found

    def _keep(self, key: _Key, before: Any, text: str | bytes) -> _State:
        """Keeps under ``key`` the state of ``before`` fed ``text`` (None: a namespace's first
        state, ``text`` the namespace)."""
        after = hashlib.sha256(f"{text}|".encode()) if before is None else before.copy()
        if before is not None:
            after.update(text)
        state = self._states[key] = (self._next_id, after)
        self._next_id += 1
        if len(self._states) > self.capacity:  # a dropped state's children just go unreached
            self._states.popitem(last=False)
        return state


def _text(tokens: Sequence[int], first: bool) -> bytes:
    """The bytes ``tokens`` add to the hashed text: comma-separated, a comma before unless they
    start the sequence."""
    if not tokens:
        return b""
    joined = ",".join(map(str, tokens))
    return (joined if first else "," + joined).encode()


class _Ends:
    """The hash states after whole sequences, by namespace and their last `END_KEY` tokens, each
    kept with its sequence and taken (once) only by the same sequence; at most ``limit`` tokens of
    sequences, least recently kept dropped first."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0
        self._states: OrderedDict[tuple[str, tuple[int, ...]], tuple[tuple[int, ...], Any]] = OrderedDict()

    def pop(self, namespace: str, tokens: tuple[int, ...]) -> Any:
        """The state after ``tokens``, no longer kept (a sequence goes on once); None if none is."""
        key = (namespace, tokens[-END_KEY:])
        found = self._states.get(key)
        if found is None or found[0] != tokens:
            return None
        del self._states[key]
        self.held -= len(tokens)
        return found[1]

    def keep(self, namespace: str, tokens: tuple[int, ...], state: Any) -> None:
        key = (namespace, tokens[-END_KEY:])
        old = self._states.pop(key, None)
        self.held += len(tokens) - (len(old[0]) if old is not None else 0)
        self._states[key] = (tokens, state)
        while self.held > self.limit:
            dropped, _ = self._states.popitem(last=False)[1]
            self.held -= len(dropped)
