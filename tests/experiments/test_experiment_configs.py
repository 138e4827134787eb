"""The experiment configs shipped in experiments/ parse, and the CPU-regime grid's cells all build."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixflow.experiments.cells import cell_options, cell_requests
from radixflow.experiments.config_parse import load_config
from radixflow.options import plan_engine

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
SIM_CONFIGS = ["ablation", "fleet", "load_sweep", "memory", "policies", "policies_cpu", "sensitivity"]


@pytest.mark.parametrize("name", SIM_CONFIGS)
def test_a_shipped_sim_config_parses_and_warns_of_nothing(name):
    config = load_config(EXPERIMENTS / f"{name}.toml")
    assert config.name == name and config.cells and config.warnings == ()
    assert {c.settings["runner"] for c in config.cells} == {"sim"}


def family(model: str) -> str:
    return model.split("-")[0]


def test_the_cpu_grid_mirrors_the_gpu_grid_at_the_small_shapes():
    gpu, cpu = load_config(EXPERIMENTS / "policies.toml"), load_config(EXPERIMENTS / "policies_cpu.toml")
    assert [v.label for v in cpu.variants] == [v.label for v in gpu.variants]
    families = {family(c.settings["model"]) for c in gpu.cells}
    assert {family(c.settings["model"]) for c in cpu.cells} == families
    assert {c.settings["model"].split("-")[1] for c in cpu.cells} == {"small"}
    for key in ("order", "arrival", "seed"):
        assert {c.workload[key] for c in cpu.cells} == {c.workload[key] for c in gpu.cells}
    profile = EXPERIMENTS / "profiles" / "cpu.json"
    assert {c.settings["hardware"] for c in cpu.cells} == {str(profile.resolve())}
    # the real runner's sizes: 512-token contexts, 32-token candidates, its default budgets
    assert {(c.workload["context_len"], c.workload["candidate_len"]) for c in cpu.cells} == {(512, 32)}
    poisson = {c.settings["model"] for c in cpu.cells if c.workload["arrival"] == "poisson"}
    assert poisson == {c.settings["model"] for c in cpu.cells}  # every model under load too


def test_every_cell_of_the_cpu_grid_builds():
    config = load_config(EXPERIMENTS / "policies_cpu.toml")
    for cell in config.cells:
        plan = plan_engine(cell_options(cell))
        requests = cell_requests(cell, plan.choice.vocab_size)
        setup = plan.build([len(r.prompt) for r in requests])
        runner = setup.runner
        assert runner.model.name == cell.settings["model"]  # type: ignore[attr-defined]
        assert runner.spec.has_recurrent == (family(cell.settings["model"]) != "qwen3")  # type: ignore[attr-defined]
        assert plan.choice.describe(runner)["hardware"]["name"] == "cpu-2core"  # type: ignore[index]
        assert len(requests) == cell.workload["groups"] * cell.workload["candidates"]


def test_the_paper_config_loads_with_its_torch_cells_checked_and_warns_of_nothing():
    pytest.importorskip("torch")
    config = load_config(EXPERIMENTS / "paper.toml")
    assert {c.settings["runner"] for c in config.cells} == {"sim", "torch"} and config.warnings == ()


def test_the_gpu_script_stores_round_profiles_its_torch_cells_find():
    """gpu.sh calibrated with --torch-threads $(nproc), so each model's own fit was stored for
    that many threads, while paper.toml's torch cells run on one: no cell's round predictor ever
    found the profile calibrated for it, and each started from the nominal prior."""
    import shlex

    config = load_config(EXPERIMENTS / "paper.toml")
    cells = {c.settings.get("torch_threads") for c in config.cells if c.settings["runner"] == "torch"}
    script = (EXPERIMENTS / "gpu.sh").read_text().replace("\\\n", " ")
    [line] = [ln for ln in script.splitlines() if ln.lstrip().startswith("radixflow calibrate")]
    words = shlex.split(line)
    assert {str(t) for t in cells} == {words[words.index("--torch-threads") + 1]}


def test_the_gpu_scripts_fixed_cost_counts_the_per_layer_part(tmp_path):
    """gpu.sh printed round_overhead_s alone as 'measured fixed cost per worker call', beside the
    3 ms the shipped GPU profiles assume; a fit that puts a call's fixed cost per decoder layer
    (launches per layer) read as a call with almost no fixed cost."""
    import subprocess
    import sys

    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HardwareProfile

    script = (EXPERIMENTS / "gpu.sh").read_text()
    body = script.split("<<'PY'", 1)[1].split("\nPY\n", 1)[0].split("\n", 1)[1]
    profile = HardwareProfile(
        "gpu", 1e14, None, 1e-4, 2e-5, layer_overhead_s=3e-4, kind_scale={"attention": 2.0}
    )
    save_profile(profile, tmp_path / "p.json")
    shown = subprocess.run(
        [sys.executable, "-c", body, str(tmp_path / "p.json")], capture_output=True, text=True, check=True
    ).stdout
    assert "0.100 ms" in shown and "0.300 ms per decoder layer" in shown and "0.020 ms per sequence" in shown
