"""Every script under benchmarks/ runs end to end at its smallest size (`--smoke`) and writes its
JSON, so a change that breaks a benchmark fails here rather than the day someone reruns it."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_utils import load_benchmark

from radixflow.bench.provenance import FORMAT

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))
# scripts that read data CI does not install: skipped, with the reason, when it is missing
NEEDS = {"derive_kernel_tables.py": "aiconfigurator_core"}
# the exactness checks the scripts write (every output equal to the reference): a false one in a
# smoke run is a wrong result, whatever the timings say
EXACT = {
    "same",
    "same_scores",
    "agree",
    "same_as_no_cache",
    "same_as_batch",
    "greedy_equal",
    "same_greedy_tokens",
    "identical_to_no_cache",
    "same_outputs_all_policies",
}


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} in the JSON (strict JSON has no NaN or Infinity)")


def exactness(figures: object, where: str = "") -> list[tuple[str, object]]:
    """Every `EXACT` key in ``figures`` (nested) with its value, by path."""
    found: list[tuple[str, object]] = []
    items = (
        figures.items()
        if isinstance(figures, dict)
        else enumerate(figures)
        if isinstance(figures, list)
        else []
    )
    for key, value in items:
        path = f"{where}/{key}"
        if key in EXACT:
            found.append((path, value))
        found += exactness(value, path)
    return found


# seconds a smoke run may take (the subprocess's bound; pytest-timeout's is a minute more): a fleet
# starts a Ray instance and two replicas, which under a load of 20 (busy CI beside other sessions)
# took past 540 s; readiness, not this figure, ends its wait, so it only bounds a hung run
LIMITS = {"fleet_serve.py": 1200}
DEFAULT_LIMIT = 600


def _limited(script: Path) -> pytest.param:  # type: ignore[valid-type]
    limit = LIMITS.get(script.name, DEFAULT_LIMIT)
    return pytest.param(script, marks=pytest.mark.timeout(limit + 60), id=script.name)


def test_every_benchmark_is_found():
    assert len(SCRIPTS) >= 18, [s.name for s in SCRIPTS]


def test_every_benchmark_writes_its_json_through_write_figures():
    """`write_figures` is strict (no NaN), whole (a run cut short leaves no half file) and says
    what produced the figures; a `json.dump` of its own has none of those."""
    bare = [p.name for p in SCRIPTS if re.search(r"write_text\(\s*json\.dumps|json\.dump\(", p.read_text())]
    assert bare == []


@pytest.mark.parametrize("script", [_limited(s) for s in SCRIPTS])
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
        timeout=LIMITS.get(script.name, DEFAULT_LIMIT),
    )
    tail = f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{script.name} exit {done.returncode}\n{tail}"
    figures = json.loads(out.read_text(), parse_constant=_refuse_constant)
    assert isinstance(figures, dict) and figures, f"{script.name}: empty JSON"
    # what produced the figures (`write_figures`): the command, the code, the machine
    run = figures.get("run", {})
    assert run.get("format") == FORMAT and run["command"][1:] == ["--smoke", "--json", str(out)], run
    assert done.stdout.strip() or done.stderr.strip(), f"{script.name} printed no figures"
    wrong = [(path, value) for path, value in exactness(figures) if value not in (True, None)]
    assert not wrong, f"{script.name}: exactness checks failed: {wrong}\n{tail}"


# every script's count of repeats (or rounds), each a median's sample: 0 leaves none to take
COUNTS = [
    ("choices.py", "--repeat"),
    ("decode_overhead.py", "--trials"),
    ("decode_step.py", "--repeats"),
    ("delta_rule_chunks.py", "--repeats"),
    ("eviction_overhead.py", "--repeat"),
    ("eviction_overhead.py", "--rounds"),
    ("fleet_serve.py", "--repeat"),
    ("lone_context.py", "--repeat"),
    ("matmul_plans.py", "--repeats"),
    ("per_candidate.py", "--repeat"),
    ("policies_torch.py", "--repeat"),
    ("policies_torch.py", "--poisson-sequences"),
    ("round_ab.py", "--repeats"),
    ("scheduler_overhead.py", "--repeat"),
    ("scheduler_overhead.py", "--rounds"),
    ("score_many.py", "--repeat"),
    ("score_route.py", "--repeat"),
    ("serve_compare.py", "--repeat"),
    ("generation_throughput.py", "--repeats"),
    ("runner_throughput.py", "--repeats"),
]
# a capacity as a share of the working set: 0 or below is no cache (the floor was run, labelled 0)
SHARES = [
    ("memory_tails.py", "--fraction"),
    ("memory_pressure.py", "--fractions"),
    ("memory_oracle.py", "--fractions"),
]
# the load a pass is measured under: none sends nothing, and nothing sent reads as a pass
LOADS = [
    ("salt_memory.py", "--clients"),
    ("salt_memory.py", "--requests"),
    ("oversized_bodies.py", "--oversized"),
    ("oversized_bodies.py", "--body-mb"),
]


def _refusal(name: str, flag: str, value: str, tmp_path: Path, monkeypatch, capsys) -> tuple[object, str]:
    """benchmarks/``name``'s ``main()`` run in this process as ``NAME --smoke FLAG VALUE`` (from
    ``tmp_path``, its JSON to out.json there): its exit status and what it wrote to stderr. In
    process, not a fresh interpreter: each refusal is read from the command line, and starting
    Python and torch again for each of these ~40 flags cost CI ~90 s. A script that lets the value
    through runs its smoke size here and fails the test."""
    script = ROOT / "benchmarks" / name
    monkeypatch.syspath_prepend(str(script.parent))  # as a script finds its siblings
    module = load_benchmark(script.stem)
    monkeypatch.chdir(tmp_path)
    argv = [str(script), "--smoke", flag, value, "--json", str(tmp_path / "out.json")]
    monkeypatch.setattr(sys, "argv", argv)
    try:
        status = module.main()
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize(("name", "flag"), COUNTS + SHARES + LOADS, ids=lambda x: x)
def test_a_zero_is_refused_in_one_line(name: str, flag: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """``--repeat 0`` (or a capacity share of 0) is a usage error naming the flag and the value
    as the command line is read, before any model loads, not a traceback after the work (with
    ``--smoke`` beside it, so a script that lets it through runs seconds, not its full size)."""
    assert f'"{flag}"' in (ROOT / "benchmarks" / name).read_text(), f"{name} has no {flag}"
    status, stderr = _refusal(name, flag, "0", tmp_path, monkeypatch, capsys)
    assert status == 2, f"{name} {flag} 0: exit {status}\n{stderr[-2000:]}"
    last = stderr.strip().splitlines()[-1]
    assert flag in last and "0" in last, stderr[-2000:]
    assert not (tmp_path / "out.json").exists()


# a name the engine does not know: its ProblemError (or ValueError) was a traceback
UNKNOWN = [
    ("memory_tails.py", "--hardware"),
    ("memory_pressure.py", "--hardware"),
    ("memory_pressure.py", "--models"),
    ("memory_oracle.py", "--hardware"),
    ("eviction_overhead.py", "--policy"),
    ("lone_context.py", "--placements"),
    ("lone_context.py", "--hardware"),
]


@pytest.mark.parametrize(("name", "flag"), UNKNOWN, ids=lambda x: x)
def test_an_unknown_name_is_refused_in_one_line(
    name: str, flag: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    status, stderr = _refusal(name, flag, "bogus", tmp_path, monkeypatch, capsys)
    assert status == 2, f"{name} {flag} bogus: exit {status}\n{stderr[-2000:]}"
    last = stderr.strip().splitlines()[-1]
    assert "'bogus'" in last and flag.rstrip("s") in last, last


# workload sizes and thread counts: a negative one was taken and failed later, far from the flag
SIZES = [
    ("per_candidate.py", "--candidates"),
    ("score_many.py", "--contexts"),
    ("generation_throughput.py", "--prompt-len"),
    ("choices.py", "--n"),
    ("round_profile.py", "--context"),
    ("serve_load.py", "--clients"),
]


@pytest.mark.parametrize(("name", "flag"), SIZES, ids=lambda x: x)
def test_a_negative_size_is_refused_in_one_line(
    name: str, flag: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    status, stderr = _refusal(name, flag, "-3", tmp_path, monkeypatch, capsys)
    assert status == 2, f"{name} {flag} -3: exit {status}\n{stderr[-2000:]}"
    last = stderr.strip().splitlines()[-1]
    assert flag in last and "must be positive, got -3" in last, last


def test_no_benchmark_takes_a_bare_integer_flag():
    """Every integer flag of a benchmark names its range (`positive_int`, `non_negative_int`,
    `int_arg`), so a bad value is refused as the command line is read."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert [p.name for p in scripts if re.search(r"type=int\b", p.read_text())] == []
