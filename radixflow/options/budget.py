"""The cache's byte budget (``cache_memory``) against a model: the capacities it caps, and whether
it can hold one request at all. Pure arithmetic over the runner's entry sizes."""

from __future__ import annotations

from collections.abc import Sequence

from radixflow.options.choice import Capacity, EntryBytes
from radixflow.options.scheduler_options import MAX_KV_BLOCKS, MAX_STATE_SLOTS
from radixflow.options.sizes import exact_size, show_size
from radixflow.problems import Problem


def budget_caps(
    budget: int, entry: EntryBytes, kv_blocks: int | None, state_slots: int | None
) -> Capacity | Problem:
    """The pools' caps under ``budget`` bytes: each kind may take all of it beside one entry of the
    other (a request needs a block and, on a hybrid model, a slot), within ``kv_blocks`` and
    ``state_slots`` where given (``state_slots`` 0: no slots, a full-attention model). A `Problem`
    naming ``cache_memory`` when the budget cannot hold one block and one slot. Pure."""
    block, slot = max(entry.block, 1), max(entry.slot, 1)
    slots_wanted = state_slots != 0 and entry.slot > 0
    one_slot = slot if slots_wanted else 0
    if budget < block + one_slot:
        what = f"one KV block ({show_size(block)})"
        what += f" and one checkpoint ({show_size(slot)})" if slots_wanted else ""
        return Problem(
            "cache_memory",
            f"{_said(budget)} cannot hold {what} of this model: "
            f"give at least {show_size(block + one_slot, at_least=True)}",
        )
    kv_cap = min((budget - one_slot) // block, kv_blocks or MAX_KV_BLOCKS, MAX_KV_BLOCKS)
    slot_cap = 0
    if slots_wanted:
        given = MAX_STATE_SLOTS if state_slots is None else state_slots
        slot_cap = min((budget - block) // slot, given, MAX_STATE_SLOTS)
    return Capacity(kv_cap, slot_cap)


def _said(budget: int) -> str:
    """The budget as the user may have written it (``1KiB``), with its bytes where a unit would
    round it (``1.46KiB (1500 bytes)``)."""
    shown = exact_size(budget)
    return f"{show_size(budget)} ({budget} bytes)" if shown.isdigit() else shown


def working_set_problem(
    budget: int, entry: EntryBytes, prompt_lengths: Sequence[int] | None, block_size: int, recurrent: bool
) -> Problem | None:
    """Why ``budget`` cannot hold the longest of these prompts alone (its KV blocks and, on a hybrid
    model, one state slot), naming ``cache_memory``; None when it can or no prompts are known. Pure."""
    if not prompt_lengths:
        return None
    longest = max(prompt_lengths)
    need = -(-longest // block_size) * max(entry.block, 1) + (max(entry.slot, 1) if recurrent else 0)
    if need <= budget:
        return None
    return Problem(
        "cache_memory",
        f"{show_size(budget)} ({budget} bytes) cannot hold one request: the longest prompt "
        f"({longest} tokens) needs {need} bytes of KV{' and state' if recurrent else ''}",
    )
