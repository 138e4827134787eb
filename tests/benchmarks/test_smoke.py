"""Every script under benchmarks/ runs end to end at its smallest size (`--smoke`) and writes its
JSON, so a change that breaks a benchmark fails here rather than the day someone reruns it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
# scripts that read data CI does not install: skipped, with the reason, when it is missing
NEEDS = {"derive_kernel_tables.py": "aiconfigurator_core"}


def test_every_benchmark_is_found():
    assert len(SCRIPTS) >= 18, [s.name for s in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_runs_at_its_smallest_size(script: Path, tmp_path: Path) -> None:
    assert "--smoke" in script.read_text(), f"{script.name}: no --smoke mode"
    needed = NEEDS.get(script.name)
    if needed and importlib.util.find_spec(needed) is None:
        pytest.skip(f"{script.name} needs {needed} (pip install '.[gpu-tables]')")
    out = tmp_path / "out.json"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    done = subprocess.run(
        [sys.executable, str(script), "--smoke", "--json", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{script.name} exit {done.returncode}\n{tail}"
    figures = json.loads(out.read_text())
    assert isinstance(figures, dict | list) and figures, f"{script.name}: empty JSON"
