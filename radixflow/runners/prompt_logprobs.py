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

from radixflow.models.batch import KVPool
from radixflow.models.layers import CausalLM
from radixflow.scheduler.output import ScheduledChunk
from radixflow.scheduler.sampling import PromptLogprob

ROWS_PER_CALL = 256  # positions per output-head call: bounds the [rows, vocab] logits in memory
MEMO_ENTRIES = 1 << 15  # (slot, token) results kept, least recently used dropped first

_Scored = tuple[float, tuple[tuple[int, float], ...]]  # (logprob of the token, top alternatives)


class PromptScorer:
    """Computes prompt logprobs from the hidden vectors in ``kv.hidden`` (owns the memo)."""

    def __init__(self, net: CausalLM, kv: KVPool, memo_entries: int = MEMO_ENTRIES) -> None:
        if kv.hidden is None:
            raise ValueError("prompt logprobs need a KV pool that keeps hidden states")
        self.net, self.kv, self.memo_entries = net, kv, memo_entries
        self._memo: OrderedDict[tuple[int, int], _Scored] = OrderedDict()
        self._by_slot: dict[int, list[int]] = {}  # slot -> tokens memoized at it
        self.rows_computed = 0  # positions that went through the output head (memo misses)

    def forget(self, slots: list[int]) -> None:
        """Drop memoized results of ``slots`` (call before a round overwrites them)."""
        if not self._by_slot:
            return
        for slot in slots:
            for token in self._by_slot.pop(slot, ()):
                self._memo.pop((slot, token), None)

    def record(self, slots: torch.Tensor, hidden: torch.Tensor) -> None:
        """Keep the final-norm ``hidden`` states of the positions at ``slots`` (mutates the pool)."""
        assert self.kv.hidden is not None
        self.kv.hidden[slots] = hidden.to(self.kv.hidden.dtype)

    def score(self, chunks: list[ScheduledChunk]) -> dict[str, list[PromptLogprob]]:
        """Logprobs of positions ``[prompt_logprobs_from, end)`` of every chunk that asks.

        Run after `record` for the round: a position may read a vector written this round.
        """
        jobs: dict[str, list[tuple[int, int, int, int]]] = {}  # id -> (position, token, slot, k)
        for c in chunks:
            if c.prompt_logprobs_from is None or c.sampling.prompt_logprobs is None:
                continue
            lo, k = max(c.prompt_logprobs_from, 1), c.sampling.prompt_logprobs
            # position p is scored from the hidden state of p - 1
            slots = self.kv.slots(list(c.block_table), lo - 1, c.end - 1, torch.device("cpu")).tolist()
            positions = range(lo, c.end)
            jobs[c.request_id] = [(p, c.tokens[p], s, k) for p, s in zip(positions, slots, strict=True)]
        if not jobs:
            return {}
        need: dict[tuple[int, int], int] = {}  # (slot, token) -> most alternatives any request wants
        for _, token, slot, k in (row for job in jobs.values() for row in job):
            need[(slot, token)] = max(k, need.get((slot, token), 0))
        self._fill(need)
        out: dict[str, list[PromptLogprob]] = {}
        for rid, job in jobs.items():
            rows = []
            for pos, token, slot, k in job:
                logprob, top = self._memo[(slot, token)]
                rows.append(PromptLogprob(pos, token, logprob, top[:k]))
            out[rid] = rows
        return out

    def _fill(self, need: dict[tuple[int, int], int]) -> None:
        """Compute every (slot, token) not memoized with at least ``k`` alternatives."""
        missing = []
        for key, k in need.items():
            hit = self._memo.get(key)
            if hit is not None and len(hit[1]) >= k:
                self._memo.move_to_end(key)
            else:
                missing.append((key, k))
        for i in range(0, len(missing), ROWS_PER_CALL):
            self._compute(missing[i : i + ROWS_PER_CALL])
        while len(self._memo) > max(self.memo_entries, len(need)):
            (slot, token), _ = self._memo.popitem(last=False)
            tokens = self._by_slot.get(slot, [])
            if token in tokens:
                tokens.remove(token)
            if not tokens:
                self._by_slot.pop(slot, None)

    def _compute(self, part: list[tuple[tuple[int, int], int]]) -> None:
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
        own_l, ids, vals = own.tolist(), top_ids.tolist(), top_vals.tolist()
        for i, ((slot, token), _) in enumerate(part):
            if (slot, token) not in self._memo:
                self._by_slot.setdefault(slot, []).append(token)
            self._memo[(slot, token)] = (own_l[i], tuple(zip(ids[i], vals[i], strict=True)))
            self._memo.move_to_end((slot, token))
