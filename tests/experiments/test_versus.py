"""The policies report: a policy against the better of native and radixflow, cell by cell."""

from __future__ import annotations

from pathlib import Path

from radixflow.experiments.execute import ExecutionOptions
from radixflow.experiments.run import run_experiment
from radixflow.experiments.versus import Versus, summary, versus, versus_section

THREE = """
name = "three"
policies = ["native", "radixflow", "adaptive"]
seeds = [0]

[defaults]
runner = "sim"
hardware = "h200"
token_budget = 256
max_requests = 16
fixed_cost_ms = [1, 10]
[defaults.workload]
groups = 2
candidates = 3
context_len = 128
candidate_len = 16

[[grid]]
name = "models"
model = ["qwen3_5-2b", "qwen3-4b"]
"""


def cell(model: str = "m", seed: int = 0) -> dict:
    workload = {"order": "grouped", "arrival": "poisson", "rate": 50.0, "groups": 8, "seed": seed}
    return {"model": model, "fixed_cost_ms": 3, "workload": workload}


def result(means: tuple[float, float, float], p99s: tuple[float, float, float], hybrid: bool = True) -> dict:
    variants = ("native", "radixflow", "adaptive")
    rows = [
        {"variant": v, "mean_latency_s": m, "p99_latency_s": p, "outputs_sha256": "x", "completed": 1}
        for v, m, p in zip(variants, means, p99s, strict=True)
    ]
    return {"key": str(means), "cell": cell(), "hybrid": hybrid, "results": rows}


def test_versus_measures_against_the_better_mean_and_the_worse_p99():
    rows = versus([result((1.0, 2.0, 0.9), (3.0, 4.0, 4.4))], "adaptive")
    assert len(rows) == 1
    assert abs(rows[0].mean - (-0.1)) < 1e-9 and abs(rows[0].p99 - 0.1) < 1e-9 and rows[0].same_outputs


def test_variants_whose_trials_differed_are_not_counted_as_the_same_outputs():
    # a variant whose repeated trials' outputs differ has no one digest (null): two such were "same"
    cell_result = result((1.0, 2.0, 0.9), (3.0, 4.0, 4.4))
    for row in cell_result["results"]:
        row["outputs_sha256"] = None
    assert not versus([cell_result], "adaptive")[0].same_outputs


def test_summary_marks_each_acceptance_line():
    rows = [Versus(cell(seed=i), True, -0.1, 0.0, True, 3.0) for i in range(40)]
    rows.append(Versus(cell("loser"), True, 0.2, 0.3, True, 3.0))
    rows.append(Versus(cell("control"), False, 0.0, 0.0, True, 3.0))
    text = "\n".join(summary(rows, "adaptive"))
    assert "| 40/41 (98%) | ≥ 97%: met |" in text  # within +1%
    assert "| +20.0% (loser, grouped, poisson 50/s, 3 ms, 8 contexts, seed 0) | ≤ +3%: **not met** |" in text
    assert "| 1/42 | none: **not met** |" in text  # the loser's p99
    rows.append(Versus(cell("second loser"), True, 0.02, 0.0, True, 3.0))
    assert "| 40/42 (95%) | ≥ 97%: **not met** |" in "\n".join(summary(rows, "adaptive"))
    assert "- +20.0% (p99 +30.0%): loser" in text


def test_a_three_policy_experiment_reports_adaptive_against_both(tmp_path: Path):
    path = tmp_path / "three.toml"
    path.write_text(THREE)
    run_experiment(path, tmp_path / "out", ExecutionOptions(), "test")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## `adaptive` against min(native, radixflow)" in report
    assert "| cells whose decoded outputs differ between variants | 0/4 | none: met |" in report
    assert "| control cells worse than the better baseline by > 1% | 0/2 | none: met |" in report


def test_a_cell_is_labelled_by_the_fixed_cost_its_runner_charged_or_none():
    # the cell's own `fixed_cost_ms` is None where the config leaves it to the profile (sim: the
    # result says what was charged) or where a real runner pays what it pays (torch: None too)
    loser = result((1.0, 1.0, 1.5), (1.0, 1.0, 1.0))
    loser["cell"] = {**loser["cell"], "fixed_cost_ms": None}
    sim = {**loser, "key": "sim", "fixed_cost_ms": 2.5, "cell": {**loser["cell"], "runner": "sim"}}
    torch = {**loser, "key": "torch", "fixed_cost_ms": None, "cell": {**loser["cell"], "runner": "torch"}}
    text = "\n".join(versus_section([sim, torch]))
    assert "- +50.0% (p99 +0.0%): m, grouped, poisson 50/s, 2.5 ms, 8 contexts, seed 0" in text
    assert "- +50.0% (p99 +0.0%): m, grouped, poisson 50/s, 8 contexts, seed 0" in text


def test_the_median_hybrid_cell_of_an_even_count_is_the_mean_of_the_middle_two():
    # two cells, -10% and +2%: the median is -4%, not the upper one (+2%)
    rows = [
        Versus(cell(seed=0), True, -0.1, 0.0, True, 3.0),
        Versus(cell(seed=1), True, 0.02, 0.0, True, 3.0),
    ]
    assert "| median hybrid cell | -4.0% | |" in "\n".join(summary(rows, "adaptive"))
