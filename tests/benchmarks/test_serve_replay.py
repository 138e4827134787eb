"""benchmarks/serve_replay.py: a bad flag is one line and exit 2, before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(flags: list[str]) -> subprocess.CompletedProcess[str]:
    script = ROOT / "benchmarks" / "serve_replay.py"
    return subprocess.run(
        [sys.executable, str(script), "--model", "qwen3_5-tiny", *flags],
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "flags",
    [
        ["--rounds", "0"],  # measured the fill rounds instead ("3 rounds, 0 requests")
        ["--rounds", "-2"],
        ["--clients", "0"],  # a traceback from the engine options
        ["--threads", "0"],  # a traceback from torch.set_num_threads
        ["--fill", "-1"],
    ],
)
def test_a_count_out_of_range_is_one_line(flags: list[str]) -> None:
    done = _run(flags)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and f"argument {flags[0]}" in done.stderr


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--model", "nonsense"], "model: unknown torch model 'nonsense'"),
        (["--matmul", "bogus"], "matmul: 'bogus' is not 'auto'"),
    ],
)
def test_an_unknown_model_or_matmul_plan_is_one_line(flags: list[str], needle: str) -> None:
    done = _run(flags)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert needle in done.stderr


def test_the_machines_load_is_recorded_beside_the_cpu_figures(tmp_path: Path) -> None:
    # CPU and run-queue seconds on a shared machine, read without the load they were taken under
    out = tmp_path / "replay.json"
    done = _run(["--smoke", "--json", str(out)])
    assert done.returncode == 0, done.stderr[-2000:]
    machine = json.loads(out.read_text())["machine"]
    assert set(machine) == {"cpus", "load_1min_before", "load_1min_after"}
    assert "load average (1 min)" in done.stdout
