"""`bench --json` says what produced its figures: the command, the code, the machine."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from radixflow.bench.provenance import FORMAT, Machine, avx512, git_dirty, provenance, write_figures
from radixflow.cli import main

SMALL = ["bench", "--groups", "2", "--candidates", "2", "--context-len", "32", "--candidate-len", "16"]


def test_the_bench_json_names_its_format_command_code_and_machine(tmp_path):
    # figures without what produced them cannot be compared with another run's: which commit,
    # which command, on which CPU (AVX-512 or not) with how many threads
    out = tmp_path / "out.json"
    argv = [*SMALL, "--policy", "native", "--repeat", "2", "--json", str(out)]
    assert main(argv) == 0
    run = json.loads(out.read_text())["run"]
    assert run["format"] == FORMAT == 1
    assert run["command"] == ["radixflow", *argv]
    assert isinstance(run["code"], str) and len(run["code"]) == 16
    assert run["commit"] is None or len(run["commit"]) == 40
    machine = run["machine"]
    assert set(machine) == {"cpu", "cpus", "avx512", "torch_threads", "platform"}
    assert machine["cpus"] == os.cpu_count() and machine["avx512"] in (True, False, None)


def test_avx512_is_read_from_the_cpus_flags_and_unknown_without_them(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512bw\n")
    assert avx512(info) is True
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2\n")
    assert avx512(info) is False
    info.write_text("processor\t: 0\nFeatures\t: fp asimd\n")  # an ARM CPU lists Features
    assert avx512(info) is False
    assert avx512(tmp_path / "absent") is None  # no /proc (macOS): unknown, not False


def test_torch_threads_are_recorded_only_where_torch_is_loaded():
    # the sim runner never imports torch (its threads compute nothing of it); loading it here
    # only to read a count would cost a bench on the sim seconds
    machine = provenance(["radixflow", "bench"], torch_threads=None).machine
    assert isinstance(machine, Machine) and machine.torch_threads is None
    assert provenance(["radixflow", "bench"], torch_threads=4).machine.torch_threads == 4


def test_a_benchmarks_json_carries_its_run_and_is_strict_and_whole(tmp_path, monkeypatch, capsys):
    # benchmarks/ wrote `json.dumps(figures)` in place: NaN where a figure was undefined (not
    # JSON), half a file where a run was cut short, and nothing of the command or machine
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--smoke"])
    out = tmp_path / "deep" / "out.json"
    write_figures(out, {"median_s": 0.5, "ratio": math.nan, "rows": [{"x": math.inf}], "tree": Path("/t")})
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert doc["median_s"] == 0.5 and doc["tree"] == "/t"
    assert doc["ratio"] is None and doc["rows"] == [{"x": None}]  # undefined: null, and said
    assert doc["run"]["command"] == ["benchmarks/x.py", "--smoke"] and doc["run"]["format"] == FORMAT
    assert doc["run"]["non_finite"] == ["/ratio", "/rows/0/x"]
    assert "not finite" in capsys.readouterr().err
    assert [p.name for p in out.parent.iterdir()] == ["out.json"]  # no temporary file left
    write_figures(out, {"a": 1})
    assert "non_finite" not in json.loads(out.read_text())["run"]


def test_a_figure_named_run_is_refused_not_overwritten(tmp_path):
    with pytest.raises(ValueError, match="run"):
        write_figures(tmp_path / "out.json", {"run": 1})


def test_figures_must_be_an_object_to_carry_their_run(tmp_path):
    with pytest.raises(TypeError, match="list"):
        write_figures(tmp_path / "out.json", [1, 2])  # type: ignore[arg-type]
    assert not (tmp_path / "out.json").exists()


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


def test_a_checkout_with_changes_not_committed_says_so(tmp_path):
    # the run named the commit checked out, whatever was changed on top of it: figures measured on
    # an edited tree read as that commit's (a benchmark script is not in the code digest either)
    package = tmp_path / "radixflow"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "radixflow/a.py")
    _git(tmp_path, "commit", "-q", "-m", "one")
    assert git_dirty(package) is False
    (tmp_path / "notes.txt").write_text("untracked: not the code that ran\n")
    assert git_dirty(package) is False
    (package / "a.py").write_text("x = 2\n")
    assert git_dirty(package) is True
    assert git_dirty(tmp_path / "elsewhere") is None  # no checkout: unknown
    assert "dirty" in provenance(["radixflow", "bench"], torch_threads=None).to_json()
