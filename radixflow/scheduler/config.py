"""What one round may hold and what the cache can hold, and the arithmetic over them."""

from __future__ import annotations

from dataclasses import dataclass

from radixflow.problems import Problem
from radixflow.scheduler.request import Request


def budget_problem(token_budget: int, block_size: int) -> Problem | None:
    """Why a round of ``token_budget`` tokens cannot hold a block of ``block_size`` (None when it
    can): the one check of this rule, for `SchedulerConfig` and `EngineOptions` alike. Pure."""
    if token_budget < block_size:
        return Problem(
            "token_budget", f"{token_budget} is smaller than one block (block_size {block_size} tokens)"
        )
    return None


@dataclass(frozen=True)
class SchedulerConfig:
    # The defaults of token_budget, max_requests and block_size are declared here and nowhere else:
    # `EngineOptions` (and so every door: flags, TOML cells, `LLM(...)`) reads them from these fields.
    token_budget: int = 2048  # tokens computed per round: prefill chunks and decode steps alike
    max_requests: int = 32  # chunks per round
    block_size: int = 16
    num_blocks: int = 32768  # KV capacity
    num_state_slots: int = 1024  # checkpoint + working-state capacity
    # one byte budget shared by KV blocks and state slots (`radixflow.cache.ledger`); None: the two
    # capacities alone limit. With one, the capacities are caps sized to what the budget can hold.
    cache_memory: int | None = None
    has_recurrent: bool = True  # False: full-attention model, nothing is ever blocked
    # the runner restores recurrent state a chunk earlier in the same round saves (it runs such
    # chunks in a later wave of each recurrent layer), so a blocked consumer may follow its
    # producer into the round (`ScanAction.FOLLOW`) instead of waiting for the next one
    same_round_state: bool = False
    eos_token_ids: tuple[int, ...] = ()  # the model's end-of-sequence tokens

    def validate(self) -> None:
        """Raise ValueError naming the first field out of range and its value."""
        problem = self.problem()
        if problem is not None:
            raise ValueError(str(problem))

    def problem(self) -> Problem | None:
        """The first field out of range, named with its value (None when all are in range). Pure."""
        problem = self._type_problem()
        if problem is not None:
            return problem
        least = {"block_size": 1, "max_requests": 1, "num_blocks": 0, "num_state_slots": 0, "cache_memory": 1}
        for name, low in least.items():
            value = getattr(self, name)
            if value is not None and value < low:  # cache_memory None: no budget
                return Problem(name, f"must be at least {low}, got {value}")
        return budget_problem(self.token_budget, self.block_size)

    def _type_problem(self) -> Problem | None:
        """The first count that is no integer: a float met a slice or range mid-run (a bare
        TypeError), a bool passed as 1 or 0. Pure."""
        counts = ("token_budget", "block_size", "max_requests", "num_blocks", "num_state_slots")
        for name in (*counts, *(("cache_memory",) if self.cache_memory is not None else ())):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool)):
                return Problem(name, f"must be an integer, got {value!r}")
        return None

    def blocks_needed(self, start: int, end: int) -> int:
        """KV blocks from the one holding position ``start`` to the one holding ``end - 1``."""
        return -(-end // self.block_size) - start // self.block_size

    def rounds_for(self, tokens: int) -> int:
        """Fewest rounds that can compute ``tokens`` prompt tokens of one request."""
        return max(1, -(-tokens // self.token_budget))

    def chunk_end(self, start: int, target: int, tokens: int) -> int | None:
        """End of a chunk from ``start`` towards ``target`` within ``tokens`` of budget.

        A chunk that stops short of its target ends on a block boundary; None when not even one
        block fits.
        """
        if target - start <= tokens:
            return target
        end = (start + tokens) // self.block_size * self.block_size
        return end if end > start else None

    def room(self, prompt_len: int) -> int:
        """The most tokens a prompt of ``prompt_len`` tokens may generate alone on an empty cache
        (0: the prompt itself does not fit). Pure; agrees with `unfit_reason`."""
        capacity = self.num_blocks * self.block_size
        if prompt_len > capacity:
            return 0
        if self.has_recurrent and self.num_state_slots < 1:
            return 0 if self.stateless_rounds(prompt_len) else 1
        return capacity - prompt_len + 1  # the last token's KV is never written

    def stateless_rounds(self, prompt_len: int) -> bool:
        """A prompt of ``prompt_len`` tokens spans several rounds on a model with recurrent state
        and no state slot to carry that state between them: it can never run here. Pure."""
        return self.has_recurrent and self.num_state_slots < 1 and prompt_len > self.token_budget

    def _kv_problem(self, req: Request, blocks: int) -> Problem:
        """``req``'s ``blocks`` of KV over the cache: named as the prompt when the prompt alone is
        over it (asking for fewer tokens cannot help), else as ``max_tokens``. Pure."""
        n = len(req.prompt)
        alone = self.blocks_needed(0, n)
        if alone > self.num_blocks:
            param, what, blocks = "prompt", f"{n} tokens", alone
        else:
            param, what = "max_tokens", f"the prompt's {n} tokens plus max_tokens {req.sampling.max_tokens}"
        # the option that sizes the cache, as `EngineOptions` names it (`--kv-blocks` on the CLI)
        cache = f"cache has {self.num_blocks} (kv_blocks)"
        fits = f"does not fit in the KV cache: {what} need {blocks} blocks, {cache}"
        return Problem(param, fits, ("max_tokens", "kv_blocks"))

    def unfit_reason(self, req: Request) -> Problem | None:
        """Why ``req`` could not run even alone on an empty cache (None when it could). Pure."""
        blocks = self.blocks_needed(0, req.max_length)
        if blocks > self.num_blocks:
            return self._kv_problem(req, blocks)
        if self.stateless_rounds(len(req.prompt)):
            return Problem(
                "prompt",
                f"does not fit: {len(req.prompt)} tokens span several rounds (token budget "
                f"{self.token_budget}) and need a state slot; the cache has none (state_slots)",
            )
        if self.has_recurrent and self.num_state_slots < 1 and req.sampling.max_tokens > 1:
            return Problem(
                "max_tokens", "decoding several tokens needs a state slot; the cache has none (state_slots)"
            )
        return None
