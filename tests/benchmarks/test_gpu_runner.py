"""benchmarks/gpu_runner.py: the counts it refuses, and the load it records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(flags: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_runner.py"), *flags],
        cwd=cwd,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_zero_repeats_is_refused_before_any_model_is_loaded(tmp_path: Path) -> None:
    # --repeats 0 loaded both models, then raised StatisticsError on the median of no time
    tiny = ["--device", "cpu", "--dtype", "float32", "--models", "qwen3_5-tiny", "--prefill", "8"]
    tiny += ["--requests", "1", "--prompt-len", "4", "--generate", "1"]
    done = _run([*tiny, "--repeats", "0", "--json", str(tmp_path / "g.json")], tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "argument --repeats: must be positive, got 0" in done.stderr
    assert not (tmp_path / "g.json").exists()


def test_the_machines_load_is_recorded_beside_the_timings(tmp_path: Path) -> None:
    # the CPU dry run's timings (and a GPU's host side) on a shared machine, without its load
    out = tmp_path / "g.json"
    done = _run(["--smoke", "--json", str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    machine = json.loads(out.read_text())["machine"]
    assert set(machine) == {"cpus", "load_1min_before", "load_1min_after"}
    assert "load average (1 min)" in done.stdout
