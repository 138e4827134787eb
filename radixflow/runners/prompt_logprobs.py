"""Prompt logprobs with prefix reuse: the output head's input is kept beside every KV slot.

The logprob of prompt token ``p`` needs the model's final-norm hidden state at position ``p - 1``.
The runner writes that vector for every position it computes into ``KVPool.hidden``, at the same
slot as the position's KV, so it lives exactly as long as the KV does: wherever the radix tree
serves a prefix's KV, it also serves what that prefix's prompt logprobs need. A request that
reuses a cached context (computed by another request, in an earlier round or earlier in this one)
runs no transformer layer for it, only the output head over the stored vectors; vLLM instead
turns prefix caching off for requests that ask for prompt logprobs.

Results are memoized per (slot, next token): K candidates scored against one cached context pay
the output head over the context once. A slot's entries are dropped before any round writes it.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from radixflow.models.kv_pool import KVPool
from radixflow.models.layers import CausalLM
from radixflow.runners.sampler import check_finite
from radixflow.scheduler.output import ScheduledChunk
from radixflow.scheduler.samples import PromptLogprobs
from radixflow.scheduler.sampling_checks import MAX_LOGPROBS

ROWS_PER_CALL = 256  # positions per output-head call: bounds the [rows, vocab] logits in memory
MEMO_ENTRIES = 1 << 15  # (slot, token) results kept, least recently used dropped first
_FIRST_ROWS = 1024  # the memo's tensors start this long and double when a round needs more

_Key = tuple[int, int]  # (slot of the position before, token scored)
_Job = tuple[str, list[int], list[int], list[_Key], int]  # request id, positions, tokens, keys, k


class PromptScorer:
    """Computes prompt logprobs from the hidden vectors in ``kv.hidden`` (owns the memo).

    The memo is tensors, a row per (slot, token): the token's logprob and the best `MAX_LOGPROBS`
    alternatives. A round's answer per request is gathered from its rows and converted to Python
    once (`PromptLogprobs` columns), never built position by position."""

    def __init__(self, net: CausalLM, kv: KVPool, memo_entries: int = MEMO_ENTRIES) -> None:
        if kv.hidden is None:
            raise ValueError("prompt logprobs need a KV pool that keeps hidden states")
        self.net, self.kv, self.memo_entries = net, kv, memo_entries
        self._vocab = int(net.config.vocab_size)
        self._rows: OrderedDict[_Key, int] = OrderedDict()  # key -> memo row, least recent first
        self._k: dict[int, int] = {}  # memo row -> alternatives it holds
        self._by_slot: dict[int, list[int]] = {}  # slot -> tokens memoized at it
        self._free: list[int] = []
        device = kv.hidden.device
        self._logprob = torch.empty(0, device=device)
        self._top_ids = torch.empty(0, MAX_LOGPROBS, dtype=torch.long, device=device)
        self._top_logprobs = torch.empty(0, MAX_LOGPROBS, device=device)
        self._rank = torch.empty(0, dtype=torch.long, device=device)
        self.rows_computed = 0  # positions that went through the output head (memo misses)

    def forget(self, slots: list[int]) -> None:
        """Drop memoized results of ``slots`` (call before a round overwrites them)."""
        if not self._by_slot:
            return
        for slot in slots:
            for token in self._by_slot.pop(slot, ()):
                self._release(self._rows.pop((slot, token)))

    def record(self, slots: torch.Tensor, hidden: torch.Tensor) -> None:
        """Keep the final-norm ``hidden`` states of the positions at ``slots`` (mutates the pool)."""
        assert self.kv.hidden is not None
        self.kv.hidden[slots] = hidden.to(self.kv.hidden.dtype)

    def score(self, chunks: list[ScheduledChunk]) -> dict[str, PromptLogprobs]:
        """Logprobs of positions ``[prompt_logprobs_from, end)`` of every chunk that asks.

        Run after `record` for the round: a position may read a vector written this round.
        """
        jobs = [job for c in chunks if (job := self._job(c)) is not None]
        if not jobs:
            return {}
        need: dict[_Key, int] = {}  # most alternatives any request wants of the key
        for _, _, _, keys, k in jobs:
            for key in keys:
                need[key] = max(k, need.get(key, 0))
        self._fill(need)
        out = {rid: self._answer(positions, tokens, keys, k) for rid, positions, tokens, keys, k in jobs}
        self._trim(len(need))
        return out

    def _job(self, c: ScheduledChunk) -> _Job | None:
        if c.prompt_logprobs_from is None or c.sampling.prompt_logprobs is None:
            return None
        lo = max(c.prompt_logprobs_from, 1)
        # position p is scored from the hidden state of p - 1
        slots = self.kv.slots(list(c.block_table), lo - 1, c.end - 1, torch.device("cpu")).tolist()
        tokens = list(c.tokens[lo : c.end])
        keys = list(zip(slots, tokens, strict=True))
        k = min(c.sampling.prompt_logprobs, self._vocab)  # a vocabulary smaller than k has fewer
        return c.request_id, list(range(lo, c.end)), tokens, keys, k

    def _answer(self, positions: list[int], tokens: list[int], keys: list[_Key], k: int) -> PromptLogprobs:
        rows = torch.tensor([self._rows[key] for key in keys], dtype=torch.long, device=self._logprob.device)
        return PromptLogprobs(
            positions,
            tokens,
            self._logprob[rows].tolist(),
            self._top_ids[rows, :k].tolist(),
            self._top_logprobs[rows, :k].tolist(),
            self._rank[rows].tolist(),
        )

    def _fill(self, need: dict[_Key, int]) -> None:
        """Compute every key not memoized with at least its ``k`` alternatives."""
        missing = []
        for key, k in need.items():
            row = self._rows.get(key)
            if row is not None and self._k[row] >= k:
                self._rows.move_to_end(key)
            else:
                missing.append((key, k))
        for i in range(0, len(missing), ROWS_PER_CALL):
            self._compute(missing[i : i + ROWS_PER_CALL])

    def _trim(self, needed: int) -> None:
        """Drop the least recently used keys past the memo's size (or this round's need)."""
        while len(self._rows) > max(self.memo_entries, needed):
            (slot, token), row = self._rows.popitem(last=False)
            self._release(row)
            tokens = self._by_slot.get(slot, [])
            if token in tokens:
                tokens.remove(token)
            if not tokens:
                self._by_slot.pop(slot, None)

    def _release(self, row: int) -> None:
        del self._k[row]
        self._free.append(row)

    def _take(self, n: int) -> list[int]:
        """``n`` free memo rows, no key's yet (the tensors grow first: a growth that fails takes
        none)."""
        while len(self._free) < n:
            self._grow()
        taken = self._free[len(self._free) - n :]
        del self._free[len(self._free) - n :]
        return taken

    def _publish(self, key: _Key, row: int, k: int) -> None:
        """``key`` answered from ``row`` (written, with ``k`` alternatives), most recent; the
        row it had before, if any, freed."""
        self._k[row] = k
        old = self._rows.get(key)
        self._rows[key] = row
        self._rows.move_to_end(key)
        if old is None:
            self._by_slot.setdefault(key[0], []).append(key[1])
        else:
            self._release(old)

    def _grow(self) -> None:
        old = len(self._logprob)
        new = max(_FIRST_ROWS, 2 * old)
        # all four made before any is kept: one that fails to grow leaves them the same length
        grown = (
            torch.cat([self._logprob, self._logprob.new_empty(new - old)]),
            torch.cat([self._top_ids, self._top_ids.new_empty(new - old, MAX_LOGPROBS)]),
            torch.cat([self._top_logprobs, self._top_logprobs.new_empty(new - old, MAX_LOGPROBS)]),
            torch.cat([self._rank, self._rank.new_empty(new - old)]),
        )
        self._logprob, self._top_ids, self._top_logprobs, self._rank = grown
        self._free.extend(range(new - 1, old - 1, -1))

    def _compute(self, part: list[tuple[_Key, int]]) -> None:
        assert self.kv.hidden is not None
        self.rows_computed += len(part)
        hidden = self.kv.hidden
        slots = torch.tensor([s for (s, _), _ in part], dtype=torch.long, device=hidden.device)
        tokens = torch.tensor([t for (_, t), _ in part], dtype=torch.long, device=hidden.device)
        with torch.inference_mode():
            logprobs = torch.log_softmax(self.net.compute_logits(hidden[slots]).float(), dim=-1)
            k = min(max(k for _, k in part), logprobs.shape[-1])
            top_vals, top_ids = logprobs.topk(k, dim=-1)
            own = logprobs.gather(1, tokens[:, None])[:, 0]
            check_finite(own, f"{len(part)} prompt positions")  # before any row is memoized
            # 1 is the likeliest; tokens tied share the best rank (vLLM's >= counts them: decisions.md)
            rank = (logprobs > own[:, None]).sum(dim=-1) + 1
        # rows written before any key names them: a round failing here leaves the memo as it was
        rows_list = self._take(len(part))
        try:
            rows = torch.tensor(rows_list, dtype=torch.long, device=hidden.device)
            self._logprob[rows] = own
            self._top_ids[rows, :k] = top_ids
            self._top_logprobs[rows, :k] = top_vals
            self._rank[rows] = rank
        except BaseException:
            self._free.extend(rows_list)
            raise
        for (key, _), row in zip(part, rows_list, strict=True):
            self._publish(key, row, k)
