"""benchmarks/serve_replay.py: a bad flag is one line and exit 2, before any work."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_utils import BENCHMARKS, load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sr():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCHMARKS))
        return load_benchmark("serve_replay")


class _Round:
    def __init__(self, *chunks: tuple[str, int, int]) -> None:
        self.chunks = list(chunks)


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


def test_the_measured_rounds_are_those_after_the_fill_not_the_last_n(sr):
    # was history[-rounds:]: 4 measured steps ran 2 rounds, so 2 fill rounds (prefill) came in
    fill = [_Round(("a", 0, 100)), _Round(("b", 0, 50), ("a", 100, 101))]
    measured = [_Round(("a", 101, 102)), _Round(("a", 102, 103), ("b", 50, 51))]
    figures = sr.round_figures([*fill, *measured], start=len(fill))
    assert figures["rounds"] == 2 and figures["prefill_tokens_per_round"] == 0
    assert figures["decode_rows_per_round"] == 1.5 and figures["chunks_per_round"] == 1.5


def test_no_measured_round_reads_null_not_a_crash(sr):
    figures = sr.round_figures([_Round(("a", 0, 100))], start=1)
    assert figures == {
        "rounds": 0,
        "prefill_tokens_per_round": None,
        "decode_rows_per_round": None,
        "chunks_per_round": None,
    }
