"""A cell's prompts against its cache, its machine and its model's context, before any cell runs.

`radixflow bench` refuses a generated workload whose prompts cannot fit the KV cache, a cache
budget that cannot hold them, pools this machine cannot hold and prompts past the model's context
before any work (`radixflow.cli.bench_setup`, `EnginePlan.build`); an experiment cell would run
and fail every request, or stop the run, after the cells before it had run. The longest
generated prompt (`WorkloadSpec.prompt_len`: a chat's last turn) is the one checked.
"""

from __future__ import annotations

import math

from radixflow.options import EngineOptions, EnginePlan, plan_engine
from radixflow.options.sim_shape import model_context
from radixflow.problems import Problem
from radixflow.workloads.candidates import WorkloadSpec


def planned(options: EngineOptions) -> tuple[EnginePlan, int | None]:
    """The cell's engine plan (a torch cell's model resolved: a zoo model built on first use) and
    its model's context, read as the runner reads it (None: a checkpoint whose config the cost
    model cannot read; the torch runner still runs it)."""
    plan = plan_engine(options)
    return plan, model_context(plan.choice.label)


def fit_problem(spec: WorkloadSpec, plan: EnginePlan, context: int | None) -> Problem | None:
    """Why the cell's prompts cannot run (None when they can), naming the option at fault or the
    longest part of a prompt (`_longest_part`); ``context``: the model's (None: known once its
    runner is built).
    Raises `ProblemError` for a ``cache_memory`` that cannot hold them."""
    options, length = plan.options, spec.prompt_len
    scheduler = plan.scheduler_config(spec.prompt_lengths())  # as the cell's engines are sized
    blocks = math.ceil(length / options.block_size)
    if blocks > scheduler.num_blocks:
        key = _longest_part(spec) if options.kv_blocks is None else "kv_blocks"
        why = f"a prompt of {length} tokens ({spec.prompt_words()}) needs {blocks} KV blocks"
        return Problem(
            key, f"{why} of {options.block_size} tokens; the cache has {scheduler.num_blocks} (kv_blocks)"
        )
    if scheduler.stateless_rounds(length):
        why = f"a prompt of {length} tokens ({spec.prompt_words()}) spans several rounds"
        needs = f"(token_budget {options.token_budget}) and needs a state slot; the cache has none"
        return Problem("state_slots", f"{why} {needs}")
    if context is not None and length >= context:
        why = f"a prompt of {length} tokens ({spec.prompt_words()}) does not fit {options.model}'s context"
        return Problem(_longest_part(spec), f"{why} of {context} tokens (one more is generated)")
    return plan.choice.memory_problem(scheduler)


def _longest_part(spec: WorkloadSpec) -> str:
    """The workload key of the longest prompt's longest part (context_len on a tie): the one to
    shorten. A chat's candidate part is every turn's."""
    parts = spec.prompt_parts()
    longest = max(("context_len", "shared_prefix_len", "candidate_len"), key=lambda k: parts.get(k, 0))
    return f"workload.{longest}"
