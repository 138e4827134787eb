"""The tables of a real-runner policy comparison (`benchmarks/policies_torch.py`)."""

from __future__ import annotations

from radixflow.bench.policy_tables import summary_markdown
from radixflow.bench.twin_runs import POLICIES


def _cell(workload: str, mean: float) -> dict[str, object]:
    policies = {p: {"mean_latency_s": mean, "identical_to_no_cache": True} for p in POLICIES}
    return {"family": "qwen3_5-small", "workload": workload, "policies": policies, "adaptive_vs_native": -0.1}


def test_the_summary_shows_no_grouped_means_for_a_family_without_the_grouped_workload():
    """The column is the grouped batch's means: a run of other workloads alone (``--workloads
    shuffled poisson``) put the shuffled cell's means under the grouped heading."""
    summary = summary_markdown([_cell("shuffled", 2.0), _cell("poisson", 1.0)])
    assert "| qwen3_5-small | - | -10.0% | -10.0% | yes |" in summary.splitlines()
    with_grouped = summary_markdown([_cell("shuffled", 2.0), _cell("grouped", 3.0)])
    assert "| qwen3_5-small | 3.00 / 3.00 / 3.00 | -10.0% | -10.0% | yes |" in with_grouped.splitlines()
