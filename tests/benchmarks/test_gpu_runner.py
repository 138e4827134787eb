"""benchmarks/gpu_runner.py: the counts it refuses, and the load it records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from benchmark_utils import BENCHMARKS, load_benchmark

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


def test_a_decode_whose_requests_ended_early_is_refused_not_counted(monkeypatch) -> None:
    # a failed round ended the requests early: tok/s counted n x generate tokens never made and
    # greedy-equal read True over the tokens there were (none)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    gpu = load_benchmark("gpu_runner")

    @dataclass
    class Pools:
        block_size: int = 16
        max_requests: int = 1
        num_blocks: int = 1
        num_state_slots: int = 1

    class Failing:
        def run(self, reqs: list) -> None:
            for r in reqs:
                r.error = "worker call failed"

    def generate(ids, max_new_tokens, **kwargs):  # type: ignore[no-untyped-def]
        rows = ids.shape[0]
        scores = [torch.zeros(rows, 8) for _ in range(max_new_tokens)]
        return SimpleNamespace(sequences=torch.zeros(rows, ids.shape[1] + max_new_tokens), scores=scores)

    monkeypatch.setattr(gpu, "new_engine", lambda *args: Failing())
    runner = SimpleNamespace(device="cpu", model=SimpleNamespace(vocab_size=8))
    setup = SimpleNamespace(runner=runner, scheduler=Pools(), options=None)
    hf = SimpleNamespace(generate=generate)
    with pytest.raises(SystemExit) as exc:
        gpu.decode(setup, hf, 2, 4, 3, 1)
    assert str(exc.value).startswith("decode 2: requests did not generate 3 tokens: [('r0', 0, 'worker call")


def test_the_calls_take_turns_first_repeat_by_repeat(monkeypatch) -> None:
    # every repeat ran ours before transformers: drift between them fell on one side alone
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    gpu = load_benchmark("gpu_runner")
    ran: list[str] = []
    calls = {"ours": lambda: ran.append("ours"), "transformers": lambda: ran.append("hf")}
    gpu.timed(calls, 2, torch.device("cpu"))
    assert ran == ["ours", "hf", "ours", "hf", "hf", "ours"]  # the first two: the warm-up


def test_the_ratio_is_also_paired_repeat_by_repeat(monkeypatch) -> None:
    # only a ratio of two medians (maybe of different repeats) and no spread: the sides ran side by
    # side in each repeat, and their paired ratios were never taken
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    gpu = load_benchmark("gpu_runner")
    clock = iter([0.0, 1.0, 0.0, 3.0, 0.0, 3.0, 0.0, 2.0])  # ours 1, hf 3; then hf 3, ours 2
    monkeypatch.setattr(gpu, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    t = gpu.timed({"ours": lambda: 0, "transformers": lambda: 0}, 2, torch.device("cpu"))
    assert t["ours"]["runs"] == [1.0, 2.0] and t["transformers"]["runs"] == [3.0, 3.0]
    assert gpu.ratios(t) == {"ratio": 2.0, "ratio_runs": [3.0, 1.5], "ratio_paired": [1.5, 2.25, 3.0]}
