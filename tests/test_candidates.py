"""Candidate workloads: nested sharing (system prompt -> context -> candidates)."""

from __future__ import annotations

import pytest

from radixflow.workloads.candidates import WorkloadSpec, build_workload


def test_nested_sharing_puts_one_system_prompt_before_every_context():
    reqs = build_workload(
        WorkloadSpec(groups=3, candidates=2, context_len=8, candidate_len=4, shared_prefix_len=5)
    )
    system = reqs[0].prompt[:5]
    assert all(r.prompt[:5] == system and len(r.prompt) == 17 for r in reqs)
    contexts = {r.prompt[5:13] for r in reqs}
    assert len(contexts) == 3  # the contexts still differ per group


def test_without_a_shared_prefix_the_workload_is_unchanged():
    spec = WorkloadSpec(groups=2, candidates=2, context_len=8, candidate_len=4)
    assert [r.prompt for r in build_workload(spec)] == [
        r.prompt for r in build_workload(WorkloadSpec(**{**spec.to_dict(), "shared_prefix_len": 0}))
    ]
    assert build_workload(spec)[0].prompt[:8] != build_workload(spec)[2].prompt[:8]


def test_negative_shared_prefix_is_refused():
    with pytest.raises(ValueError, match="shared prefix"):
        WorkloadSpec(shared_prefix_len=-1).validate()
