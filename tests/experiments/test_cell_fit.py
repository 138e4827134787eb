"""A cell's prompts against its cache, its machine and its model's context (`cell_fit`)."""

from __future__ import annotations

import pytest

from radixflow.experiments.cell_fit import fit_problem
from radixflow.options import EngineOptions, EnginePlan, machine, plan_engine
from radixflow.scheduler.config import SchedulerConfig
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec


def pools_bytes(plan: EnginePlan, config: SchedulerConfig) -> int:
    entry = plan.choice.entry_bytes(config.block_size)
    return entry.block * config.num_blocks + entry.slot * config.num_state_slots


def test_a_torch_cells_pools_are_checked_at_the_prompts_its_workload_builds(monkeypatch):
    pytest.importorskip("torch")
    # a chat's turns grow (128 ... 576 tokens): its pools, sized to the prompts, were checked as if
    # every turn were the last, and a cell whose pools fit this machine was refused
    spec = WorkloadSpec(kind="chats", groups=4, candidates=8, context_len=64, candidate_len=64)
    plan = plan_engine(EngineOptions(runner="torch", model="qwen3_5-small", device="cpu"))
    built = plan.scheduler_config([len(r.prompt) for r in build_workload(spec).requests])
    longest = plan.scheduler_config([spec.prompt_len] * spec.requests)
    have = (pools_bytes(plan, built) + pools_bytes(plan, longest)) / 2 / machine.MEMORY_SHARE
    monkeypatch.setattr(machine, "available_memory", lambda: int(have))
    assert plan.choice.memory_problem(longest) is not None  # as it was checked: too large here
    assert fit_problem(spec, plan, None) is None
