"""A cell's prompts against its cache and its model's context, checked before any cell runs.

`radixflow bench` refuses a generated workload whose prompts cannot fit the KV cache or the
model's context before any work (`radixflow.cli.bench_setup`); an experiment cell doing the same
would run and fail every request, after the cells before it had run. Generated prompts all have
one length, so if one cannot fit, none can.
"""

from __future__ import annotations

import math

from radixflow.options import EngineOptions, EnginePlan
from radixflow.problems import Problem
from radixflow.workloads.candidates import WorkloadSpec

PROMPT = "shared_prefix_len + context_len + candidate_len"


def fit_problem(spec: WorkloadSpec, options: EngineOptions, plan: EnginePlan | None) -> Problem | None:
    """Why the cell's prompts cannot run (None when they can); the problem names ``kv_blocks`` or
    ``workload.context_len``. ``plan``: the sim runner's (its capacities and context are known
    without building it); None for the torch runner, whose pools are sized to the workload, so
    only a given ``kv_blocks`` can be too small."""
    length = spec.prompt_len
    blocks = math.ceil(length / options.block_size)
    lengths = [length] * spec.requests
    capacity = options.kv_blocks if plan is None else plan.scheduler_config(lengths).num_blocks
    if capacity is not None and blocks > capacity:
        key = "workload.context_len" if options.kv_blocks is None else "kv_blocks"
        why = f"a prompt of {length} tokens ({PROMPT}) needs {blocks} KV blocks"
        return Problem(key, f"{why} of {options.block_size} tokens; the cache has {capacity} (kv_blocks)")
    context = None if plan is None else plan.choice.spec.max_context  # type: ignore[attr-defined]
    if context is not None and length >= context:
        why = f"a prompt of {length} tokens ({PROMPT}) does not fit {options.model}'s context"
        return Problem("workload.context_len", f"{why} of {context} tokens (one more is generated)")
    return None
