"""`radixflow experiment`: a tiny config end to end (serial and on Ray), caching, config errors."""

from __future__ import annotations

import io
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from radixflow.experiments.cells import without_timing
from radixflow.experiments.config import Cell, ExperimentConfigError
from radixflow.experiments.config_checks import parse_seeds
from radixflow.experiments.config_parse import load_config
from radixflow.experiments.execute import ExecutionOptions
from radixflow.experiments.run import run_experiment
from radixflow.fleet import DEFAULT_ROUTER
from radixflow.workloads.build import build_workload
from radixflow.workloads.candidates import WorkloadSpec
from radixflow.workloads.workload import CANDIDATE, INDEPENDENT

TINY = """
name = "tiny"
policies = ["native", "radixflow"]
seeds = [0]

[defaults]
runner = "sim"
hardware = "h200"
token_budget = 256
max_requests = 16
[defaults.workload]
groups = 2
candidates = 3
context_len = 128
candidate_len = 16

[[grid]]
name = "models"
model = ["qwen3_5-2b", "qwen3-4b"]

[[grid]]
name = "fixed cost"
model = "falcon_h1-1.5b"
fixed_cost_ms = [0, 20]

[[grid]]
name = "load"
model = "qwen3_5-2b"
[grid.workload]
arrival = "poisson"
rate = [10.0, 1000.0]
"""
CELL_FIELDS = {"key", "cell", "model", "hybrid", "requests", "fixed_cost_ms", "results", "wall_s"}
VARIANT_FIELDS = {
    "variant",
    "rounds",
    "mean_latency_s",
    "p99_latency_s",
    "reuse_rate",
    "latencies_s",
    "goodput_rps",
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path


def _check_outputs(out: Path) -> dict:
    doc = json.loads((out / "results.json").read_text())
    assert doc["variants"] == ["native", "radixflow"] and len(doc["cells"]) == 6
    for cell in doc["cells"]:
        assert set(cell) >= CELL_FIELDS
        assert [r["variant"] for r in cell["results"]] == doc["variants"]
        for r in cell["results"]:
            assert set(r) >= VARIANT_FIELDS and r["completed"] == r["requests"] == 6
    report = (out / "report.md").read_text()
    assert "−44% to −11%" in report and "| sim | qwen3_5-2b |" in report and "## Regime" in report
    for png in ("latency_cdf.png", "rounds.png", "latency_vs_load.png", "latency_change_vs_fixed_cost.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    return doc


def test_tiny_experiment_serial_then_cached_then_on_ray(tiny: Path, tmp_path: Path):
    serial = run_experiment(tiny, tmp_path / "serial", ExecutionOptions(), "test")
    assert serial.ran == 6
    doc = _check_outputs(tmp_path / "serial")
    control = next(c for c in doc["cells"] if c["model"] == "qwen3-4b")
    assert control["hybrid"] is False and control["results"][0]["rounds"] == control["results"][1]["rounds"]

    again = run_experiment(tiny, tmp_path / "serial", ExecutionOptions(), "test")
    assert again.ran == 0 and again.results == serial.results

    pytest.importorskip("ray")
    on_ray = run_experiment(tiny, tmp_path / "ray", ExecutionOptions(ray=True), "test")
    assert on_ray.ran == 6
    _check_outputs(tmp_path / "ray")
    assert [without_timing(r) for r in on_ray.results] == [without_timing(r) for r in serial.results]


def test_output_that_is_not_a_terminal_gets_a_progress_line_per_step(tiny: Path, tmp_path: Path, monkeypatch):
    # a log file shows no live bar; 6 cells give a line per cell (5% of 6 rounds down to 1), here
    # from the first second on
    monkeypatch.setattr("radixflow.progress.QUIET_S", 0.0)
    log = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # plotting included: a stray warning is a user-facing wart
        console = Console(file=log, force_terminal=False)
        run_experiment(tiny, tmp_path / "o", ExecutionOptions(), "test", console)
    lines = [line for line in log.getvalue().splitlines() if "/6 (" in line]
    assert [re.search(r"(\d)/6 \(", line)[1] for line in lines] == ["1", "2", "3", "4", "5", "6"]
    assert lines[0].startswith("tiny: models ") and re.search(r"6/6 \(100%\), \d+ s, ETA 0 s$", lines[-1])


def test_with_seeds_keeps_each_distinct_cell_once_per_new_seed(tiny: Path, tmp_path: Path):
    text = TINY.replace("seeds = [0]", "seeds = [0, 1, 2]")
    text = text.replace('name = "load"', 'name = "load"\nseeds = [8]')  # a grid's own seeds
    (tmp_path / "s.toml").write_text(text)
    config = load_config(tmp_path / "s.toml")
    assert len(config.cells) == 2 * 3 + 2 * 3 + 2 * 1
    again = config.with_seeds([4, 9])
    unseeded = [(c.group, c.settings, {**c.workload, "seed": None}) for c in again.cells]
    assert [c.workload["seed"] for c in again.cells] == [4, 9] * 6
    assert unseeded[::2] == unseeded[1::2] and len({json.dumps(u, sort_keys=True) for u in unseeded}) == 6
    assert [c.group for c in again.cells[::2]] == [c.group for c in load_config(tiny).cells]
    assert parse_seeds("0,3-5,4") == [0, 3, 4, 5] and parse_seeds(" 7 ") == [7]


def test_cells_are_counted_as_the_grid_expands(tiny: Path):
    seen: list[tuple[int, int]] = []
    config = load_config(tiny, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(n, 6) for n in range(1, 7)] and len(config.cells) == 6


def test_cell_key_changes_with_the_cell(tiny: Path):
    cells = load_config(tiny).cells
    variants = load_config(tiny).variants
    assert len({c.key(variants) for c in cells}) == len(cells)


def test_a_cells_trace_has_a_process_per_variant_and_leaves_its_key_alone(tiny: Path, tmp_path: Path):
    from radixflow.experiments.cells import run_cell

    config = load_config(tiny)
    cell = config.cells[0]
    traced = Cell(cell.group, {**cell.settings, "trace_out": str(tmp_path / "cell.json")}, cell.workload)
    assert traced.key(config.variants) == cell.key(config.variants)  # same results, cached alike
    run_cell(traced, config.variants)
    events = json.loads((tmp_path / "cell.json").read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert names == ["native · branch", "radixflow · branch"]


def test_variants_that_differ_in_cache_policy_alone_are_processes_told_apart(tiny: Path, tmp_path: Path):
    # each was named after its policy and placement alone: "adaptive · lone" twice, the two runs
    # of experiments/memory.toml's comparison indistinguishable in the viewer
    from radixflow.experiments.cells import run_cell

    tiny.write_text(TINY.replace('["native", "radixflow"]', '["adaptive+lru", "adaptive+cost-per-byte"]'))
    config = load_config(tiny)
    cell = config.cells[0]
    traced = Cell(cell.group, {**cell.settings, "trace_out": str(tmp_path / "cell.json")}, cell.workload)
    run_cell(traced, config.variants)
    events = json.loads((tmp_path / "cell.json").read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert names == ["adaptive · lone · cost-per-byte+all", "adaptive · lone · lru+all"]


def test_a_cell_stopped_by_ctrl_c_keeps_its_trace_down_to_the_round_it_rolled_back(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # the trace was written after the cell's runs (or every few seconds): a Ctrl-C left it empty
    from radixflow.experiments.cells import run_cell
    from radixflow.runners.sim import SimRunner

    run = SimRunner.run

    def interrupted(self, batch):  # type: ignore[no-untyped-def]
        if batch.round_index == 1:
            raise KeyboardInterrupt
        return run(self, batch)

    monkeypatch.setattr(SimRunner, "run", interrupted)
    config = load_config(tiny)
    cell = config.cells[0]
    traced = Cell(cell.group, {**cell.settings, "trace_out": str(tmp_path / "cell.json")}, cell.workload)
    with pytest.raises(KeyboardInterrupt):
        run_cell(traced, config.variants)
    events = json.loads((tmp_path / "cell.json").read_text())["traceEvents"]
    rounds = [e["name"] for e in events if e.get("cat") == "round" and e["ph"] == "X"]
    assert rounds == ["round 0", "round 1 (rolled back)"]


@pytest.mark.parametrize(
    ("edits", "key"),
    [
        ([("[defaults]", '[defaults]\ntrace_out = "T"')], "defaults.trace_out"),  # all 7 cells
        ([("fixed_cost_ms = [0, 20]", 'fixed_cost_ms = [0, 20]\ntrace_out = "T"')], "grid[1].trace_out"),
        (  # two grids of one cell each, one file spelled two ways
            [
                ("fixed_cost_ms = [0, 20]", 'fixed_cost_ms = 0\ntrace_out = "T"'),
                ('name = "load"', 'name = "load"\ntrace_out = "./T"'),
                ("rate = [10.0, 1000.0]", "rate = 10.0"),
            ],
            "grid[2].trace_out",
        ),
    ],
)
def test_a_trace_file_written_by_two_cells_is_refused(tiny: Path, tmp_path: Path, monkeypatch, edits, key):
    """One path a cell: a second cell writing the same trace replaced the first's without a word."""
    monkeypatch.chdir(tmp_path)
    message = refusal(tiny, edits)
    assert "\n" not in message and f": {key}: " in message and "T'" in message, message


def test_a_trace_file_of_one_cell_is_refused_on_several_seeds(tiny: Path, tmp_path: Path):
    one_cell = TINY.replace(
        'model = ["qwen3_5-2b", "qwen3-4b"]', f'model = "qwen3_5-2b"\ntrace_out = "{tmp_path / "T"}"'
    )
    tiny.write_text(one_cell)
    config = load_config(tiny)  # one cell writes it: fine
    assert config.with_seeds([0]).cells
    with pytest.raises(ExperimentConfigError, match=r"^--seeds: .*trace_out"):
        config.with_seeds([0, 1])


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (("[defaults]", "[defaults]\ncolour = 1"), "defaults.colour"),
        (("rate = [10.0, 1000.0]", "rate = [10.0, -1.0]"), "grid[2].workload.rate"),
        (('model = "falcon_h1-1.5b"', 'model = "falcon-h1"'), "grid[1].model"),
        (("token_budget = 256", "token_budget = 0"), "defaults.token_budget"),
        (('"radixflow"]', '"greedy"]'), "policies"),
        (("groups = 2", 'groups = "two"'), "defaults.workload.groups"),
        (('hardware = "h200"', 'hardware = "missing.json"'), "defaults.hardware"),
        (("candidate_len = 16", 'candidate_len = 16\norder = "random"'), "defaults.workload.order"),
        (("candidate_len = 16", "candidate_len = 0"), "defaults.workload.candidate_len"),
        (("[defaults]", '[defaults]\nrouter = "round_robin"'), "defaults.router"),
        (("[defaults]", "[defaults]\nreplicas = 0"), "defaults.replicas"),
        (("candidate_len = 16", 'candidate_len = 16\nkind = "essays"'), "defaults.workload.kind"),
        (("candidate_len = 16", "candidate_len = 16\nskew = -1.0"), "defaults.workload.skew"),
        (("[defaults]", "[defaults]\ncapacity = 0.0"), "defaults.capacity"),
        (("[defaults]", "[defaults]\ncapacity = 1.5"), "defaults.capacity"),
        (('"radixflow"]', '"radixflow+fifo"]'), "policies"),
        (('"radixflow"]', '"radixflow+lru+maybe"]'), "policies"),
        (('"radixflow"]', '"radixflow+lru+all+more"]'), "policies"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tiny: Path, edit: tuple[str, str], key: str):
    tiny.write_text(TINY.replace(*edit, 1))
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    message = str(info.value)
    assert "\n" not in message and f": {key}" in message


# an empty profile name was resolved against the config's directory first: "cannot read hardware
# profile /the/config/dir: Is a directory", where --hardware '' and LLM(hardware='') say it is empty
@pytest.mark.parametrize(("key", "value"), [("hardware", '""'), ("hardware", '" "'), ("cost_profile", '""')])
def test_an_empty_profile_is_refused_in_the_options_words(tiny: Path, key: str, value: str):
    text = TINY.replace('hardware = "h200"\n', "")
    tiny.write_text(text.replace("[defaults]", f"[defaults]\n{key} = {value}", 1))
    with pytest.raises(ExperimentConfigError, match=rf": defaults\.{key}: must not be empty$"):
        load_config(tiny)


@pytest.mark.parametrize("key", ["hardware", "cost_profile"])
def test_a_mistyped_profile_name_is_said_as_typed(tiny: Path, key: str):
    # it said "unknown hardware '/the/config/dir/h10'", a path never typed, where --hardware h10
    # and LLM(hardware="h10") say "unknown hardware 'h10'"
    text = TINY.replace('hardware = "h200"\n', "")
    tiny.write_text(text.replace("[defaults]", f'[defaults]\n{key} = "h10"', 1))
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    assert str(info.value).endswith(
        f"defaults.{key}: unknown hardware 'h10': not one of h100, h200, cpu and not a profile file"
    ), str(info.value)


@pytest.mark.parametrize("key", ["hardware", "cost_profile"])
def test_a_profile_named_dash_is_refused_as_every_door_refuses_it(tiny: Path, key: str):
    # "-" read a file named "-" beside the config (or said "unknown hardware '-'"), where --hardware -
    # and LLM(hardware="-") say standard input is not read; "./-" names that file
    text = TINY.replace('hardware = "h200"\n', "")
    tiny.write_text(text.replace("[defaults]", f'[defaults]\n{key} = "-"', 1))
    (tiny.parent / "-").write_text("{}")
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    assert str(info.value).endswith(
        f"defaults.{key}: - (standard input) is not read: give a path (./- for a file named -)"
    )


@pytest.mark.parametrize("key", ["hardware", "cost_profile"])
def test_a_profile_name_too_long_for_a_path_is_one_line(tiny: Path, key: str):
    # "OSError: [Errno 36] File name too long" and a traceback, from the look for the file
    text = TINY.replace('hardware = "h200"\n', "")
    tiny.write_text(text.replace("[defaults]", f'[defaults]\n{key} = "{"a" * 300}"', 1))
    with pytest.raises(ExperimentConfigError, match=rf": defaults\.{key}: must be a path of parts up to 255"):
        load_config(tiny)


@pytest.mark.parametrize(
    ("edits", "key", "says"),
    [
        # 599,994 independent requests: the cell's workload is too large, found only when it ran
        (
            [("[defaults]", "[defaults]\nindependent_share = 0.99999")],
            "defaults.independent_share",
            "too large",
        ),
        (  # the share sets the count: the workload's own count was dropped without a word
            [
                ("[defaults]", "[defaults]\nindependent_share = 0.5"),
                ("groups = 2", "groups = 2\nindependent = 3"),
            ],
            "defaults.independent_share",
            "workload.independent",
        ),
    ],
)
def test_independent_share_is_checked_with_the_workload_it_makes(tiny: Path, edits, key, says):
    message = refusal(tiny, edits)
    assert "\n" not in message and f": {key}: " in message and says in message, message


def test_independent_share_is_of_the_queue_a_skewed_workload_builds(tiny: Path):
    # skew gives every group at least one request: 20 groups x 1 candidate at skew 2 are 34
    # requests, and a share of 0.5 mixed in 20 independent ones (two in five, not one in two)
    text = TINY.replace("[defaults]", "[defaults]\nindependent_share = 0.5", 1)
    tiny.write_text(text.replace("groups = 2\ncandidates = 3", "groups = 20\ncandidates = 1\nskew = 2.0"))
    for cell in load_config(tiny).cells:
        work = build_workload(WorkloadSpec(**cell.run_workload()))
        kinds = [work.tag(r).kind for r in work.requests]
        assert kinds.count(INDEPENDENT) == kinds.count(CANDIDATE) == 34


def needs_torch(edits: list[tuple[str, str]]) -> None:
    """Skip where the edits make a torch cell and the torch extra is missing (its model is
    resolved when the config loads)."""
    if any('runner = "torch"' in new for _, new in edits):
        pytest.importorskip("torch")


def refusal(tiny: Path, edits: list[tuple[str, str]]) -> str:
    """The one-line refusal of the tiny config with ``edits`` (old, new) applied, once each."""
    text = TINY
    for edit in edits:
        text = text.replace(*edit, 1)
    tiny.write_text(text)
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    return str(info.value)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (("groups = 2", "groups = 2.0"), "defaults.workload.groups: must be an integer, got 2.0"),
        (
            ("candidate_len = 16", "candidate_len = 16\norder = 3"),
            "defaults.workload.order: must be a string, got 3",
        ),
        (
            ("candidate_len = 16", 'candidate_len = 16\nskew = "1"'),
            "defaults.workload.skew: must be a number, got '1'",
        ),
    ],
)
def test_a_workload_value_of_the_wrong_type_says_the_type_in_words(tiny: Path, edit, says):
    # it said "must be a int" and "must be a str" (an engine option says "must be an integer")
    tiny.write_text(TINY.replace(*edit, 1))
    with pytest.raises(ExperimentConfigError, match=re.escape(says)):
        load_config(tiny)


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (("groups = 2", "groups = true"), "defaults.workload.groups: must be an integer, got true"),
        (('"native", "radixflow"]', '"native", false]'), "policies: each entry must be a string, got false"),
        (("token_budget = 256", "token_budget = {a = [true, 'True']}"), "got {a = [true, 'True']}"),
        (("groups = 2", "groups = 'True'"), "groups: must be an integer, got 'True'"),  # a string as it is
        (
            ("token_budget = 256", 'token_budget = {"b c" = "x\\ny", d = {}}'),
            "got {'b c' = \"x\\ny\", d = {}}",
        ),
        (("groups = 2", 'groups = "it\'s"'), 'groups: must be an integer, got "it\'s"'),
        # a date or a time said "got datetime.date(2024, 1, 2)": Python's repr, no TOML
        (("groups = 2", "groups = 2024-01-02"), "groups: must be an integer, got 2024-01-02"),
        (("groups = 2", "groups = 07:32:00"), "groups: must be an integer, got 07:32:00"),
        (("groups = 2", "groups = 1979-05-27T07:32:00Z"), "got 1979-05-27T07:32:00+00:00"),
        (("groups = 2", "groups = 1979-05-27 07:32:00.5"), "got 1979-05-27T07:32:00.500000"),
        (
            ("token_budget = 256", "token_budget = [256, 2024-01-02]"),
            "token_budget: must be an integer, got 2024-01-02",
        ),
    ],
)
def test_a_toml_value_is_quoted_as_toml_spells_it(tiny: Path, edit, says):
    # "got True", "got {'a': 1}": Python's spelling, which a TOML file given it back refuses
    assert refusal(tiny, [edit]).endswith(says)


def test_a_fleet_cell_runs_its_variants_behind_the_router(tiny: Path):
    from radixflow.experiments.cells import run_cell

    fleet = TINY.replace("[defaults]", '[defaults]\nreplicas = 3\nrouter = "checkpoint"', 1)
    tiny.write_text(fleet.replace("groups = 2", 'groups = 6\nkind = "chats"', 1))
    config = load_config(tiny)
    cell = config.cells[0]
    result = run_cell(cell, config.variants)
    for r in result["results"]:
        assert r["completed"] == r["requests"] == 18 and r["reuse_rate"] > 0.5
        assert r["fleet"]["replicas"] == 3 and r["fleet"]["router"] == "checkpoint"
        assert sum(p["routed"] for p in r["fleet"]["per_replica"]) == 18


def test_a_fleet_cells_trace_has_a_process_per_replica_of_each_variant(tiny: Path, tmp_path: Path):
    """The fleet cell builds its engines through the same builder as the others: with
    ``trace_out``, every replica's engine is traced (it once dropped the observer)."""
    from radixflow.experiments.cells import run_cell

    trace = tmp_path / "fleet.json"
    one_cell = TINY.replace(
        'model = ["qwen3_5-2b", "qwen3-4b"]', f'model = "qwen3_5-2b"\ntrace_out = "{trace}"'
    )
    tiny.write_text(one_cell.replace("[defaults]", "[defaults]\nreplicas = 2", 1))
    config = load_config(tiny)
    run_cell(config.cells[0], config.variants)
    events = json.loads(trace.read_text())["traceEvents"]
    names = sorted(e["args"]["name"] for e in events if e["name"] == "process_name")
    assert names == [f"{v.label} · replica {i}" for v in config.variants for i in (0, 1)]
    assert any(e["name"] != "process_name" for e in events)  # rounds recorded, not just names


def test_a_fleet_needs_the_sim_runner():
    from radixflow.experiments.config_parse import parse_config

    data = {"defaults": {"runner": "torch", "model": "qwen3_5-tiny", "replicas": 2}}
    with pytest.raises(
        ExperimentConfigError, match=r"defaults\.replicas: a fleet of 2 replicas needs the sim"
    ):
        parse_config(data, "x.toml", Path("."))


def test_fleet_keys_at_their_defaults_leave_cell_keys_alone(tiny: Path):
    before = [c.key(load_config(tiny).variants) for c in load_config(tiny).cells]
    tiny.write_text(TINY.replace("[defaults]", f'[defaults]\nreplicas = 1\nrouter = "{DEFAULT_ROUTER}"', 1))
    assert [c.key(load_config(tiny).variants) for c in load_config(tiny).cells] == before


@pytest.mark.parametrize(
    ("setting", "revision"),
    [("replicas = 2", "FLEET_REVISION"), ("capacity = 0.5", "PRESSURE_REVISION")],
)
def test_a_cells_key_names_the_revision_of_its_results(tiny: Path, monkeypatch, setting, revision):
    # cells cached before a fix to the fleet's results, or to the TTFT p95 rule of pressure
    # figures, must not be reused; cells without that setting keep their keys
    def keys() -> list:
        return [c.key(load_config(tiny).variants) for c in load_config(tiny).cells]

    tiny.write_text(TINY.replace("[defaults]", f"[defaults]\n{setting}", 1))
    revised = keys()
    monkeypatch.setattr(f"radixflow.experiments.config.{revision}", 999)
    assert keys() != revised
    tiny.write_text(TINY)
    plain = keys()
    monkeypatch.setattr(f"radixflow.experiments.config.{revision}", 1000)
    assert keys() == plain


def test_not_toml_is_one_line(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(ExperimentConfigError, match="not valid TOML"):
        load_config(bad)


def test_an_integer_python_cannot_read_is_one_line_naming_the_file(tmp_path: Path):
    # tomllib raises a bare ValueError (not TOMLDecodeError) for an integer past Python's 4300
    # digits: `kv_blocks = 999...9` was a traceback, where a 400-digit one is "must be at most"
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "t"\n[defaults]\nmodel = "qwen3_5-2b"\nkv_blocks = {"9" * 5000}\n')
    with pytest.raises(ExperimentConfigError, match=f"^{bad}: not valid TOML: Exceeds the limit"):
        load_config(bad)


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("tflops = 1e400", "defaults.tflops"),
        ("fixed_cost_ms = -1E+400", "defaults.fixed_cost_ms"),
        ("independent_share = 1_0e400", "defaults.independent_share"),
        ("workload.rate = 1e400", "defaults.workload.rate"),
    ],
)
def test_a_number_no_float_holds_is_quoted_as_written(tmp_path: Path, line: str, key: str):
    # tomllib reads 1e400 as inf: the cell was refused as "got inf", a value nobody wrote (a
    # flag says "got 1e400"), and a workload's number as "must be finite" in words of its own
    config = tmp_path / "t.toml"
    work = 'groups = 2\ncandidates = 2\narrival = "poisson"'
    if line.startswith("workload."):
        work, line = f"{work}\n{line.removeprefix('workload.')}", ""
    config.write_text(f'name = "t"\n[defaults]\nmodel = "qwen3_5-2b"\n{line}\n[defaults.workload]\n{work}\n')
    written = line.partition(" = ")[2] or "1e400"
    with pytest.raises(ExperimentConfigError) as info:
        load_config(config)
    assert str(info.value) == f"{config}: {key}: must be a finite number, got {written}"


@pytest.mark.parametrize(
    "line",
    [
        f'[defaults.workload]\ngroups = "{"x" * 5000}"',
        f"description = [{', '.join(['1'] * 3000)}]",
        f'name = "{"x" * 5000}"',
        f'[[grid]]\nname = "{"x" * 5000}"',
        f'policies = ["{"a" * 5000}", "{"a" * 5000}"]',
    ],
    ids=["workload", "description", "name", "grid name", "repeated"],
)
def test_a_long_value_is_quoted_back_cut_short(tmp_path: Path, line: str):
    # each was quoted whole: a refusal of 5000 characters, where every door cuts a value at 40
    config = tmp_path / "t.toml"
    top = line if line.startswith(("description", "name", "policies")) else ""
    rest = "" if top else line
    config.write_text(f'{top}\n[defaults]\nrunner = "sim"\nmodel = "qwen3_5-2b"\n{rest}\n')
    with pytest.raises(ExperimentConfigError) as info:
        load_config(config)
    assert len(str(info.value)) < len(str(config)) + 200, str(info.value)[:300]


@pytest.mark.parametrize("value", ["[" * 3000 + "]" * 3000, "{a = " * 3000 + "1" + "}" * 3000])
def test_a_value_nested_past_the_parser_is_one_line_naming_the_file(tmp_path: Path, value: str):
    # tomllib recurses per bracket and raised RecursionError: `radixflow experiment` a traceback
    bad = tmp_path / "bad.toml"
    bad.write_text(f'name = "t"\nx = {value}\n')
    with pytest.raises(ExperimentConfigError, match=f"^{bad}: not valid TOML: nested too deeply$"):
        load_config(bad)


TORCH = """
name = "torch"
[defaults]
runner = "torch"
model = "lfm2-tiny"
token_budget = 64
max_requests = 8
cost_profile = "cpu.json"
[defaults.workload]
groups = 2
candidates = 3
context_len = 40
candidate_len = 8
"""


def test_torch_cell_agrees_and_checks_the_cost_model_on_its_rounds(tmp_path: Path):
    pytest.importorskip("torch")
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    save_profile(HARDWARE["cpu"], tmp_path / "cpu.json")
    (tmp_path / "t.toml").write_text(TORCH)
    out = run_experiment(tmp_path / "t.toml", tmp_path / "out", ExecutionOptions(), "test")
    (cell,) = out.results
    for r in cell["results"]:
        assert r["agreement"] == 1.0 and r["failed"] == 0
        assert r["worker_clock"] == "cpu" and r["worker_measured_s"] > 0
        assert r["predicted_worker_s"] > 0 and r["prediction_error"] is not None
    assert "## Cost model check (torch cells)" in (tmp_path / "out" / "report.md").read_text()


def test_a_repeated_torch_cell_still_checks_the_cost_model(tmp_path: Path):
    # with repetitions > 1 the worker calls outnumbered the first trial's rounds, the CPU time could
    # not be split, and every variant's measured time was null: the cost check left the report
    pytest.importorskip("torch")
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    save_profile(HARDWARE["cpu"], tmp_path / "cpu.json")
    (tmp_path / "t.toml").write_text(TORCH.replace("[defaults]", "[defaults]\nrepetitions = 2", 1))
    (cell,) = run_experiment(tmp_path / "t.toml", tmp_path / "out", ExecutionOptions(), "test").results
    for r in cell["results"]:
        assert r["worker_clock"] == "cpu" and r["worker_measured_s"] > 0, r["variant"]
        assert r["predicted_worker_s"] > 0 and r["prediction_error"] is not None
    assert "## Cost model check (torch cells)" in (tmp_path / "out" / "report.md").read_text()


def test_cpu_time_maps_onto_runs_only_when_calls_and_rounds_match():
    from radixflow.engine.records import RoundRecord
    from radixflow.experiments.costcheck import split_cpu

    def rnd(i: int, error: str | None = None) -> RoundRecord:
        return RoundRecord(i, 0.0, 1.0, 1.0, 1, 1, 0, 0, "budget", (), error=error)

    assert split_cpu([1.0, 2.0, 3.0], [[rnd(0), rnd(1)], [rnd(0)]]) == [3.0, 3.0]
    assert split_cpu([1.0, 2.0, 3.0], [[rnd(0)], [rnd(0)]]) is None  # no clean mapping
    # a rolled-back round's call is one of the calls, and no part of the rounds the run stood by
    assert split_cpu([1.0, 2.0, 3.0], [[rnd(0), rnd(1, "worker call failed"), rnd(2)]]) == [4.0]


def test_a_cell_under_pressure_runs_each_variant_with_its_own_eviction_and_admission(tiny: Path):
    """``capacity`` caps the cache at a share of the working set (one byte budget); a variant
    ``policy+eviction+admission`` runs on engines built with those; each gets pressure figures."""
    from radixflow.experiments.cells import run_cell

    text = TINY.replace(
        'policies = ["native", "radixflow"]', 'policies = ["adaptive+lru", "adaptive+cost-per-byte+likely"]'
    )
    text = text.replace("[defaults]", "[defaults]\ncapacity = 0.25", 1)
    tiny.write_text(text.replace("groups = 2", 'groups = 6\nkind = "chats"', 1))
    config = load_config(tiny)
    assert [(v.policy, v.eviction, v.admission) for v in config.variants] == [
        ("adaptive", "lru", None),
        ("adaptive", "cost-per-byte", "likely"),
    ]
    result = run_cell(config.cells[0], config.variants)
    lru, cost = (r["pressure"] for r in result["results"])
    assert lru["working_set_bytes"] == cost["working_set_bytes"] > 0
    for p in (lru, cost):
        assert 0 <= p["hit_rate"] < 1 and p["ttft_p95_ms"] >= p["ttft_p50_ms"] > 0
        assert p["recomputed_flops"] > 0
    assert lru["evicted_kv"] + lru["evicted_checkpoint"] > 0  # a quarter of the working set evicts
    assert (lru["hit_rate"], lru["evicted_kv"]) != (cost["hit_rate"], cost["evicted_kv"])  # other engines


@pytest.mark.parametrize(
    ("edits", "key", "says"),
    [
        # bench refuses these before any work; a cell ran them and failed every request
        ([('name = "models"', 'name = "models"\nkv_blocks = 4')], "grid[0].kv_blocks", "9 KV blocks"),
        ([("[defaults]", "[defaults]\nkv_blocks = 4")], "defaults.kv_blocks", "9 KV blocks"),
        (  # a hybrid model's prompt over several rounds with no slot for its state between them
            [("token_budget = 256", "token_budget = 16\nstate_slots = 0")],
            "defaults.state_slots",
            "spans several rounds (token_budget 16)",
        ),
        ([("context_len = 128", "context_len = 300000")], "defaults.workload.context_len", "context"),
        (  # a chat's last turn carries every turn's tokens: the three keys named did not add up to it
            [
                ("candidate_len = 16", 'candidate_len = 16\nkind = "chats"'),
                ("[defaults]", "[defaults]\nkv_blocks = 4"),
            ],
            "defaults.kv_blocks",
            "a prompt of 176 tokens (shared_prefix_len + context_len + 3 turns × candidate_len) needs 11 KV",
        ),
        (
            [
                (
                    'name = "load"\nmodel = "qwen3_5-2b"',
                    'name = "load"\nrunner = "torch"\nmodel = "qwen3_5-small"\nkv_blocks = 4',
                )
            ],
            "grid[2].kv_blocks",
            "9 KV blocks",
        ),
        (  # found only when the cell's runner was built, after the cells before it had run
            [
                (
                    'name = "load"\nmodel = "qwen3_5-2b"',
                    'name = "load"\nrunner = "torch"\nmodel = "lfm2-tiny"\ncache_memory = "1KiB"',
                )
            ],
            "grid[2].cache_memory",
            "cannot hold one KV block",
        ),
        (  # lfm2-tiny's context is 4096 tokens
            [
                (
                    'name = "load"\nmodel = "qwen3_5-2b"',
                    'name = "load"\nrunner = "torch"\nmodel = "lfm2-tiny"',
                ),
                ("context_len = 128", "context_len = 5000"),
            ],
            "defaults.workload.context_len",
            "lfm2-tiny's context of 4096",
        ),
    ],
)
def test_a_cell_whose_prompts_cannot_fit_is_refused_naming_the_key(tiny: Path, edits, key, says):
    needs_torch(edits)
    message = refusal(tiny, edits)
    assert "\n" not in message and f": {key}: " in message and says in message, message


@pytest.mark.parametrize(
    ("settings", "key", "says"),
    [
        ('kernels = "native"\ndtype = "bfloat16"', "grid[2].kernels", "native kernels run on a CPU"),
        ('matmul = "mkl"\ndtype = "bfloat16"', "grid[2].matmul", "plans route CPU float32 matmuls"),
    ],
)
def test_a_torch_cells_dtype_kernels_and_matmul_are_checked_before_any_cell_runs(
    tiny: Path, settings, key, says
):
    # accepted when the config loaded, and refused only when the cell's runner was built, after
    # the cells before it had run: LLM(...), bench and generate refuse the pair up front
    pytest.importorskip("torch")
    torch_cell = f'name = "load"\nrunner = "torch"\nmodel = "lfm2-tiny"\n{settings}'
    message = refusal(tiny, [('name = "load"\nmodel = "qwen3_5-2b"', torch_cell)])
    assert "\n" not in message and f": {key}: " in message and says in message, message


@pytest.mark.parametrize(
    ("variant", "option"),
    [("native@", "placement"), ("native@+lru", "placement"), ("@branch", "policy"), ("native+", "eviction"),
     ("native++likely", "eviction"), ("native+lru+", "admission")],
)  # fmt: skip
def test_a_variants_empty_part_is_refused_naming_the_entry_and_part(tiny: Path, variant, option):
    # "native@" ran as "native" without a word, while "native+" was "policies: must not be empty",
    # naming neither the entry nor its part (the list was not empty)
    message = refusal(tiny, [('"radixflow"]', f'"{variant}"]')])
    assert "\n" not in message and f": policies: {variant!r}: an empty {option}" in message, message


@pytest.mark.parametrize(
    ("variant", "option", "value"),
    [
        ("greedy", "policy", "greedy"),
        ("native@left", "placement", "left"),
        ("native+fifo", "eviction", "fifo"),
        ("native+lru+maybe", "admission", "maybe"),
    ],
)
def test_a_variants_unknown_part_is_refused_in_the_options_words(tiny: Path, variant, option, value):
    # each part listed its known names in an order of its own ("branch, lone, align, none"), where
    # --placement, a cell's placement key and LLM(...) say "align, branch, lone, none"
    from radixflow.options import EngineOptions
    from radixflow.problems import ProblemError

    with pytest.raises(ProblemError) as info:
        EngineOptions.from_mapping({option: value})
    message = refusal(tiny, [('"radixflow"]', f'"{variant}"]')])
    assert message.endswith(f": policies: {info.value.problem.message}"), message


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (("[defaults]", '[defaults]\npolicy = "native"'), "defaults.policy"),
        (('name = "load"', 'name = "load"\npolicy = "native"'), "grid[2].policy"),
        (("seeds = [0]", 'seeds = [0]\npolicy = "native"'), "policy"),
    ],
)
def test_a_policy_key_is_refused_pointing_at_policies(tiny: Path, edit, key):
    # an engine option at every other door: it said "unknown key (known: model, runner, ...)",
    # a list without `policies`, the key every cell's policies come from
    message = refusal(tiny, [edit])
    assert "\n" not in message and f": {key}: " in message and "`policies`" in message, message


def test_a_seed_key_in_a_cell_is_refused_pointing_at_seeds(tiny: Path):
    # it was accepted and did nothing: the workload's seed comes from `seeds`
    message = refusal(tiny, [("[defaults]", "[defaults]\nseed = 7")])
    assert "\n" not in message and ": defaults.seed: " in message and "seeds" in message, message


@pytest.mark.parametrize(
    ("edits", "says"),
    [
        (
            [("[defaults]", '[defaults]\ndevice = "cuda"')],
            "defaults.device has no effect with the sim runner",
        ),
        ([('name = "models"', 'name = "models"\ntorch_threads = 2')], "grid[0].torch_threads has no effect"),
        ([("[defaults]", '[defaults]\ncost_profile = "h100"')], "defaults.cost_profile has no effect"),
        ([("[defaults]", '[defaults]\nrouter = "prefix"')], "defaults.router has no effect"),
        (
            [("[defaults]", "[defaults]\ntflops = 100.0")],
            "defaults.tflops has no effect with hardware 'h200': its kernel times are measured",
        ),
        (
            [('hardware = "h200"', 'hardware = "cpu"\nscheduler_time = "serial"')],
            "defaults.scheduler_time has no effect with hardware 'cpu': it models no scheduler time",
        ),
        ([("candidate_len = 16", "candidate_len = 16\nrate = 50.0")], "defaults.workload.rate has no effect"),
        (
            [("groups = 2", "groups = 1"), ("candidate_len = 16", "candidate_len = 16\nskew = 1.0")],
            "defaults.workload.skew has no effect with one group (groups = 1)",
        ),
        (
            [("groups = 2", "groups = 1"), ("candidate_len = 16", "candidate_len = 16\nnamespaces = 2")],
            "defaults.workload.namespaces has no effect with one group (groups = 1)",
        ),
        ([('name = "load"', 'name = "load"\nplacement = "branch"\nstate_slots = 8')], None),
        (
            [('model = ["qwen3_5-2b", "qwen3-4b"]', 'model = "qwen3-4b"\nstate_slots = 8')],
            "grid[0].state_slots has no effect on a full-attention model",
        ),
        (
            [('model = ["qwen3_5-2b", "qwen3-4b"]', 'model = "qwen3-4b"\nadmission = "likely"')],
            "grid[0].admission has no effect on a full-attention model",
        ),
        (
            [('model = "falcon_h1-1.5b"', 'runner = "torch"\nmodel = "falcon_h1-small"')],
            "grid[1].fixed_cost_ms has no effect with the torch runner",
        ),
    ],
)
def test_a_key_that_cannot_change_any_cell_it_sets_is_a_one_line_warning(tiny: Path, edits, says):
    needs_torch(edits)
    text = TINY
    for edit in edits:
        text = text.replace(*edit, 1)
    tiny.write_text(text)
    warned = load_config(tiny).warnings
    assert all("\n" not in w and w.startswith(f"{tiny}: ") for w in warned), warned
    if says is None:
        assert warned == (), warned
    else:
        assert len(warned) == 1 and says in warned[0], warned


def test_a_key_that_changes_some_of_its_cells_is_not_warned_about(tiny: Path):
    # rate applies to the poisson cells of a grid that sweeps arrival (experiments/paper.toml)
    swept = 'arrival = ["batch", "poisson"]\nrate = 10.0'
    tiny.write_text(TINY.replace('arrival = "poisson"\nrate = [10.0, 1000.0]', swept, 1))
    assert load_config(tiny).warnings == ()


def test_a_cell_on_a_profile_file_is_keyed_by_what_the_file_holds(tiny: Path, tmp_path: Path):
    # a recalibrated profile at the same path gave the cached results of the old one, silently
    from dataclasses import replace

    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    profile = tmp_path / "fitted.json"
    save_profile(HARDWARE["h200"], profile)
    tiny.write_text(TINY.replace('hardware = "h200"', 'hardware = "fitted.json"', 1))
    before = [c.key(load_config(tiny).variants) for c in load_config(tiny).cells]
    save_profile(replace(HARDWARE["h200"], per_request_s=1e-3), profile)
    after = [c.key(load_config(tiny).variants) for c in load_config(tiny).cells]
    assert set(before).isdisjoint(after)


def test_a_run_interrupted_while_writing_keeps_the_last_results_and_report(
    tiny: Path, tmp_path: Path, monkeypatch
):
    # results.json and report.md were written in place: an interrupt mid-write left half a file
    out = tmp_path / "out"
    run_experiment(tiny, out, ExecutionOptions(), "test")
    before = {name: (out / name).read_text() for name in ("results.json", "report.md")}
    write_text = Path.write_text

    def torn(self: Path, text: str, *args, **kwargs) -> int:
        write_text(self, text[: len(text) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(tiny, out, ExecutionOptions(), "test again")
    monkeypatch.undo()
    assert {name: (out / name).read_text() for name in before} == before


def test_a_torch_cell_on_a_cpu_clock_with_spinning_threads_is_warned_about_as_bench_does(
    tiny: Path, monkeypatch
):
    pytest.importorskip("torch")
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    torch_cell = 'name = "load"\nrunner = "torch"\nmodel = "lfm2-tiny"\nclock = "cpu"\ntorch_threads = 2'
    tiny.write_text(TINY.replace('name = "load"\nmodel = "qwen3_5-2b"', torch_cell, 1))
    warned = [w for w in load_config(tiny).warnings if "spin-waits" in w]
    assert len(warned) == 1 and warned[0].startswith(f"{tiny}: "), warned
    assert warned[0].endswith("or torch_threads = 1"), warned  # the key, not the flag --torch-threads


def test_a_torch_cell_below_float32_is_warned_about_as_bench_does(tiny: Path):
    # `bench --dtype bfloat16` warns that outputs are no longer a no-cache run's; a cell took it silently
    pytest.importorskip("torch")
    torch_cell = 'name = "load"\nrunner = "torch"\nmodel = "lfm2-tiny"\ndtype = "bfloat16"'
    tiny.write_text(TINY.replace('name = "load"\nmodel = "qwen3_5-2b"', torch_cell, 1))
    warned = [w for w in load_config(tiny).warnings if "below float32" in w]
    assert len(warned) == 1 and warned[0].startswith(f"{tiny}: dtype bfloat16 "), warned
    assert 'use dtype = "float32" for exact outputs' in warned[0], warned  # the key, not --dtype


def test_a_fleet_cell_runs_each_variant_with_its_own_eviction_and_admission(tiny: Path, monkeypatch):
    # a fleet's engines were built with the cell's eviction and admission, whatever the variant said
    from radixflow.experiments.cells import run_cell
    from radixflow.options import EngineSetup

    built: list[tuple[str, str]] = []
    engine = EngineSetup.engine

    def record(self: EngineSetup, *args, **kwargs):
        built.append((self.options.eviction, self.options.admission))
        return engine(self, *args, **kwargs)

    monkeypatch.setattr(EngineSetup, "engine", record)
    fleet = TINY.replace("[defaults]", "[defaults]\nreplicas = 2", 1)
    tiny.write_text(fleet.replace('"radixflow"]', '"radixflow+cost-per-byte+likely"]', 1))
    config = load_config(tiny)
    run_cell(config.cells[0], config.variants)
    assert built == [("lru", "all")] * 2 + [("cost-per-byte", "likely")] * 2, built


@pytest.mark.parametrize(
    ("edits", "says"),
    [
        (
            [
                ('"native", "radixflow"]', '"native@branch", "radixflow@align"]'),
                ("[defaults]", '[defaults]\nplacement = "lone"'),
            ],
            "defaults.placement has no effect with every policy in `policies` naming its own placement",
        ),
        (
            [
                ('"native", "radixflow"]', '"native+lru", "radixflow+cost-per-byte"]'),
                ("[defaults]", '[defaults]\neviction = "lru"'),
            ],
            "defaults.eviction has no effect with every policy in `policies` naming its own eviction",
        ),
        (
            [("[defaults]", "[defaults]\nreplicas = 2\nrepetitions = 3")],
            "defaults.repetitions has no effect on a fleet (replicas > 1): it runs once",
        ),
    ],
)
def test_a_key_every_variant_or_the_fleet_overrides_is_a_warning(tiny: Path, edits, says):
    text = TINY
    for edit in edits:
        text = text.replace(*edit, 1)
    tiny.write_text(text)
    assert [w for w in load_config(tiny).warnings if says in w] != [], load_config(tiny).warnings


def test_cache_sizes_beside_capacity_are_a_warning_not_a_refusal(tiny: Path):
    # capacity caps the cache at its share of the working set, replacing kv_blocks and the rest
    tiny.write_text(TINY.replace("[defaults]", "[defaults]\ncapacity = 0.5\nkv_blocks = 4", 1))
    warned = load_config(tiny).warnings
    assert len(warned) == 1 and "defaults.kv_blocks has no effect with capacity" in warned[0], warned


def test_a_trace_file_that_cannot_be_opened_is_refused_before_any_cell_runs(tiny: Path, tmp_path: Path):
    # bench opens its output files before any work; a cell's trace failed only when the cell ran
    traced = TINY.replace(
        'model = ["qwen3_5-2b", "qwen3-4b"]', 'model = "qwen3_5-2b"\ntrace_out = "/proc/t.json"'
    )
    message = refusal(tiny, [(TINY, traced)])
    assert "\n" not in message and ": grid[0].trace_out: cannot write /proc/t.json" in message, message
    fresh = tmp_path / "fresh.json"
    tiny.write_text(traced.replace("/proc/t.json", str(fresh)))
    load_config(tiny)
    assert not fresh.exists()  # opened to check, and not left behind


def test_an_unknown_key_lists_the_keys_a_cell_takes_and_not_seed(tiny: Path):
    message = refusal(tiny, [("[defaults]", "[defaults]\ncolour = 1")])
    known = message.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert "token_budget" in known and "workload" in known and "seed" not in known, message


def test_a_fleet_cell_under_pressure_reports_its_pressure_figures(tiny: Path):
    # a fleet cell with capacity ran capped but left out the figures every other capped cell has
    # (benchmarks/memory_table.py reads them from every result)
    from radixflow.experiments.cells import run_cell

    fleet = TINY.replace("[defaults]", "[defaults]\nreplicas = 2\ncapacity = 0.3", 1)
    tiny.write_text(fleet.replace("groups = 2", 'groups = 4\nkind = "chats"', 1))
    config = load_config(tiny)
    result = run_cell(config.cells[0], config.variants)
    for r in result["results"]:
        pressure = r["pressure"]
        assert pressure["working_set_bytes"] > 0 and {"evicted_kv", "evicted_checkpoint"} <= set(pressure), r


def test_a_sim_cell_given_torch_threads_runs_without_torch(tiny: Path, tmp_path: Path, monkeypatch):
    # torch_threads changes no sim cell (a warning says so), yet the cell imported torch to save and
    # restore the thread count: without the torch extra, a ModuleNotFoundError traceback
    tiny.write_text(TINY.replace('name = "models"', 'name = "models"\ntorch_threads = 2'))
    monkeypatch.setitem(sys.modules, "torch", None)
    assert run_experiment(tiny, tmp_path / "out", ExecutionOptions(), "test").ran == 6


def test_a_plot_that_fails_part_way_leaves_no_half_written_png(tmp_path, monkeypatch):
    """matplotlib writes a PNG as it renders; a failure part way (a full disk) left a truncated
    image under the plot's name, which a viewer or a later report took for the plot."""
    from matplotlib.figure import Figure

    from radixflow.experiments.execute import OutputWriteError
    from radixflow.experiments.plots import write_plots

    def fails_part_way(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"\x89PNG\r\n\x1a\n")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", fails_part_way)
    out = tmp_path / "latency_cdf.png"
    out.write_bytes(b"the previous plot")
    result = {
        "key": "k",
        "cell": {"runner": "sim", "workload": {"order": "grouped", "arrival": "batch"}},
        "model": "m",
        "results": [{"variant": "native", "completed": 2, "latencies_s": [0.1, 0.2]}],
    }
    with pytest.raises(OutputWriteError, match=r"latency_cdf\.png"):
        write_plots([result], tmp_path)
    assert out.read_bytes() == b"the previous plot"
    assert [p.name for p in tmp_path.iterdir()] == ["latency_cdf.png"]


def test_a_failed_requests_row_keeps_its_columns_whatever_its_grid_and_reasons_hold():
    # a grid "H100 | batch" or a reason over two lines split the row into other columns
    from radixflow.experiments.failures import failure_section

    variant = {"variant": "native", "completed": 1, "failures": [{"id": "r", "reason": "bad\ntoken | id"}]}
    cell = {"key": "k", "cell": {"group": "H100 | batch"}, "model": "m", "requests": 2, "results": [variant]}
    rows = [line for line in failure_section([cell]) if line.startswith("| H100")]
    assert len(rows) == 1 and len(re.findall(r"(?<!\\)\|", rows[0])) == 6, rows
    assert "H100 \\| batch" in rows[0] and "bad token \\| id" in rows[0]


def test_the_cost_check_says_which_clock_each_worker_call_time_is_on():
    # a torch cell on the CPU clock had its CPU time shown under "worker-call wall time"
    from radixflow.experiments.report import cost_check

    variant = {"variant": "native", "rounds": 3, "worker_call_s": 0.5, "worker_measured_s": 0.5}
    variant |= {"worker_clock": "cpu", "predicted_worker_s": 0.4, "prediction_error": -0.2}
    cells = [
        {"model": "m", "runner_settings": {"clock": clock}, "results": [variant]} for clock in ("wall", "cpu")
    ]
    lines = cost_check(cells)
    assert "worker-call wall time" not in "\n".join(lines)
    rows = [line for line in lines if line.startswith("| m |")]
    assert [row.split(" | ")[3] for row in rows] == ["0.50 (wall)", "0.50 (cpu)"]


def test_a_plot_this_run_does_not_make_is_not_left_from_an_earlier_run(tmp_path):
    # a re-run of an edited config (no Poisson load sweep now) left the old latency_vs_load.png
    # beside a report and results it no longer belongs to
    from radixflow.experiments.plots import write_plots

    stale = tmp_path / "latency_vs_load.png"
    stale.write_bytes(b"the previous run's plot")
    variant = {"variant": "native", "completed": 2, "latencies_s": [0.1, 0.2], "rounds": 2}
    result = {"key": "k", "cell": {"runner": "sim", "workload": {"order": "grouped", "arrival": "batch"}}}
    made = write_plots([result | {"model": "m", "hybrid": True, "results": [variant]}], tmp_path)
    assert made == ["latency_cdf.png", "rounds.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == made


ONE_CELL = TINY.split('\n[[grid]]\nname = "fixed cost"')[0].replace(
    'model = ["qwen3_5-2b", "qwen3-4b"]', 'model = "qwen3_5-2b"'
)


def test_a_cached_cell_given_a_trace_runs_again_to_write_it(tiny: Path, tmp_path: Path):
    # trace_out is left out of a cell's key (it changes no figure), so a cell an earlier run had
    # cached was taken from the cache: the trace asked for was never written, and results.json
    # named no trace (or the earlier run's path)
    from radixflow.experiments.execute import execute

    out, trace = tmp_path / "out", tmp_path / "cell.json"
    tiny.write_text(ONE_CELL)
    plain = execute(load_config(tiny), out, ExecutionOptions())
    tiny.write_text(ONE_CELL + f'trace_out = "{trace}"\n')
    ran: list[str] = []
    traced = execute(load_config(tiny), out, ExecutionOptions(), on_cell=lambda p, _: ran.append(p.key))
    assert ran == [plain[0]["key"]] and json.loads(trace.read_text())["traceEvents"]
    assert traced[0]["cell"]["trace_out"] == str(trace)
    assert without_timing(traced[0]) | {"cell": None} == without_timing(plain[0]) | {"cell": None}


def test_seeds_in_overlapping_ranges_are_counted_once_against_the_limit():
    # "0-500,400-900" names 901 seeds; the limit counted the overlap twice and refused it as
    # "more than 1000 seeds"
    from radixflow.experiments.config_checks import MAX_SEEDS

    assert parse_seeds("0-500,400-900") == list(range(901))
    assert len(parse_seeds(f"0-{MAX_SEEDS - 1},3")) == MAX_SEEDS
    for too_many in (f"0-{MAX_SEEDS}", f"0-{MAX_SEEDS - 1},{MAX_SEEDS}", "0-99999999999999999999"):
        with pytest.raises(ValueError, match=f"^--seeds: more than {MAX_SEEDS} seeds"):
            parse_seeds(too_many)


def test_a_seed_in_a_cells_workload_is_refused_pointing_at_seeds(tiny: Path):
    # it was "unknown key (known: groups, ...)": a workload has a seed, which comes from `seeds`
    message = refusal(tiny, [("groups = 2", "groups = 2\nseed = 7")])
    assert "\n" not in message and ": defaults.workload.seed: " in message and "`seeds`" in message, message
    assert "unknown key" not in message


@pytest.mark.parametrize(
    "held",
    [
        b"\xff\xfe{",
        b"[]",
        b'"a cell"',
        b"{}",
        b'{"results": []}',
        b'{"results": [{"variant": "native"}]}',
        b"[" * 100_000 + b"]" * 100_000,  # nested past json's recursion: RecursionError, not ValueError
    ],
    ids=["not-utf8", "list", "string", "empty", "no-results", "one-variant", "deep"],
)
def test_a_cell_file_that_holds_no_cell_result_runs_the_cell_again(tiny: Path, tmp_path: Path, held: bytes):
    # a cell's file cut short or garbled where it was copied (not UTF-8, not a JSON object) was a
    # traceback (UnicodeDecodeError, TypeError) where a file that is not JSON runs the cell again;
    # a JSON object without a result per variant was one still (KeyError 'results', an unpacking
    # ValueError) once the report read it
    from radixflow.experiments.execute import execute

    tiny.write_text(ONE_CELL)
    out = tmp_path / "out"
    (first,) = execute(load_config(tiny), out, ExecutionOptions())
    (out / "cells" / f"{first['key']}.json").write_bytes(held)
    (again,) = execute(load_config(tiny), out, ExecutionOptions())
    assert without_timing(again) == without_timing(first)


def test_a_report_of_one_policy_compares_nothing(tiny: Path, tmp_path: Path):
    # with one policy (experiments/fleet.toml) the report read "Against the paper (`radixflow` vs
    # `radixflow`)", "every change is relative to `radixflow`", and empty tables under it
    tiny.write_text(ONE_CELL.replace('policies = ["native", "radixflow"]', 'policies = ["radixflow"]'))
    run_experiment(tiny, tmp_path / "out", ExecutionOptions(), "test")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "vs `radixflow`" not in report and "relative to" not in report and "## Against" not in report
    assert "1 cell; one variant, `radixflow`: nothing to compare it with" in report, report
    assert "## Cells" not in report and "## Plots" in report


def test_a_rerun_says_how_many_cells_other_code_computed(tiny: Path, tmp_path: Path):
    # a cell's key leaves the code out, so a re-run after radixflow changed took every cell from
    # the cache without a word: figures of two versions side by side in one report
    tiny.write_text(ONE_CELL)
    out = tmp_path / "out"
    first = run_experiment(tiny, out, ExecutionOptions(), "test")
    assert first.results[0]["code"] == first.code and "other code" not in (out / "report.md").read_text()
    cached = out / "cells" / f"{first.results[0]['key']}.json"
    cached.write_text(json.dumps(json.loads(cached.read_text()) | {"code": "0123456789abcdef"}))
    again = run_experiment(tiny, out, ExecutionOptions(), "test")
    assert again.ran == 0 and again.results[0]["code"] == "0123456789abcdef" != again.code == first.code
    said = "**1 of 1 cell came from the cache of other code than this run's"
    assert said in (out / "report.md").read_text()
    assert json.loads((out / "results.json").read_text())["code"] == again.code


def test_seeds_in_defaults_are_refused_pointing_where_seeds_go(tiny: Path):
    # it was "unknown key (known: model, runner, ...)": `seeds` is a key, of the config or a grid
    message = refusal(tiny, [("[defaults]", "[defaults]\nseeds = [1, 2]")])
    assert "\n" not in message and ": defaults.seeds: " in message and "unknown key" not in message, message
    assert "top level" in message and "[[grid]]" in message, message


def test_a_cell_that_crashes_names_itself_in_the_traceback(tiny: Path, tmp_path: Path, monkeypatch):
    # a crash in a cell (a bug, a GPU out of memory in a forward pass) was a traceback that named
    # no cell: which of a grid's cells to look at was anyone's guess
    from radixflow.experiments.execute import execute

    def crash(cell, variants):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr("radixflow.experiments.execute.run_cell", crash)
    tiny.write_text(ONE_CELL)
    config = load_config(tiny)
    with pytest.raises(RuntimeError, match="CUDA out of memory") as info:
        execute(config, tmp_path / "out", ExecutionOptions())
    key = config.cells[0].key(config.variants)
    assert getattr(info.value, "__notes__", []) == [f"in cell 'models' (qwen3_5-2b, seed 0, key {key})"]


@pytest.mark.parametrize("torch_error", [False, True])
def test_a_cell_out_of_memory_fails_alone_and_the_cells_after_it_run_and_cached(
    tiny: Path, tmp_path: Path, monkeypatch, torch_error: bool
):
    # an out of memory (a GPU's in one cell's forward pass) is what CellError names as a reason
    # the checks cannot see, yet it was a crash: it stopped a serial run at once, the cells after
    # it never ran, and since it came first again on every re-run, they never could
    from radixflow.experiments import execute as ex

    error = pytest.importorskip("torch").OutOfMemoryError if torch_error else MemoryError
    config = load_config(tiny)  # six cells; the second runs out of memory
    short = config.cells[1].key(config.variants)
    run_cell = ex.run_cell

    def one_short(cell, variants):
        if cell.key(variants) == short:
            raise error("CUDA out of memory. Tried to allocate 2.00 GiB\n(more lines)")
        return run_cell(cell, variants)

    monkeypatch.setattr(ex, "run_cell", one_short)
    with pytest.raises(ex.CellError) as info:
        ex.execute(config, tmp_path / "out", ExecutionOptions())
    line = str(info.value)
    assert "\n" not in line and f"key {short}): out of memory: CUDA out of memory. Tried" in line, line
    cached = {p.stem for p in (tmp_path / "out" / "cells").glob("*.json")}
    assert cached == {c.key(config.variants) for c in config.cells} - {short}


def test_a_cell_that_fails_as_it_runs_leaves_the_cells_after_it_run_and_cached(
    tiny: Path, tmp_path: Path, monkeypatch
):
    # the first cell that failed stopped the run: the cells after it never ran, and since the
    # failing cell ran first again on every re-run, they never could until it was fixed
    from radixflow.experiments import execute as ex
    from radixflow.problems import Problem, ProblemError

    config = load_config(tiny)  # six cells; the second and the fourth fail
    failing = {config.cells[1].key(config.variants), config.cells[3].key(config.variants)}
    run_cell = ex.run_cell

    def some_fail(cell, variants):
        if cell.key(variants) in failing:
            raise ProblemError(Problem("trace_out", "cannot write t.json: No space left on device"))
        return run_cell(cell, variants)

    monkeypatch.setattr(ex, "run_cell", some_fail)
    with pytest.raises(ex.CellError) as info:
        ex.execute(config, tmp_path / "out", ExecutionOptions())
    line = str(info.value)
    assert "\n" not in line and line.startswith("cell 'models' (qwen3-4b, seed 0, key "), line
    assert "trace_out: cannot write t.json" in line and "1 more of the 6 cells failed" in line, line
    cached = {p.stem for p in (tmp_path / "out" / "cells").glob("*.json")}
    assert cached == {c.key(config.variants) for c in config.cells} - failing


def test_cells_with_no_file_inputs_keep_the_keys_their_cached_results_have(tiny: Path):
    # the keys this config's cells have since 7 Dec (their grid's name left out, each value as it
    # runs, no rate its arrivals never read): shipped results caches stay valid only while they do not change
    config = load_config(tiny)
    assert [c.key(config.variants) for c in config.cells] == [
        "05def525101848db",
        "9a94eea0b37ef177",
        "e093aedd36244b56",
        "ed515119b300e6e7",
        "8dbac1cfa3ac0f17",
        "cf6f275a471d65c2",
    ]


def _checkpoint(directory: Path) -> Path:
    """A checkpoint directory the sim reads its shape from (config.json; weights it never reads)."""
    from radixflow.models.zoo_catalogue import preset_config

    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps(preset_config("qwen3_5-tiny")))
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def _checkpoint_config(tmp_path: Path) -> Path:
    """A config in its own folder naming the checkpoint beside it by a relative path."""
    ck = _checkpoint(tmp_path / "exp" / "ck")
    path = ck.parent / "t.toml"
    path.write_text(TINY.split("[[grid]]")[0] + '[[grid]]\nname = "ck"\nmodel = "ck"\n')
    return path


def test_a_model_directory_is_relative_to_the_config_as_a_profile_file_is(tmp_path: Path, monkeypatch):
    # it was read relative to the current directory: "unknown sim model 'ck'" when run from
    # elsewhere, while hardware = "fitted.json" beside it was found
    path = _checkpoint_config(tmp_path)
    monkeypatch.chdir(tmp_path)
    (cell,) = load_config(path).cells
    assert cell.settings["model"] == str((tmp_path / "exp" / "ck").resolve())


@pytest.mark.parametrize(
    ("grids", "key"),
    [
        ('trace_out = "ck/t.json"\n', "grid[0].trace_out"),  # the cell's own model
        (
            '[[grid]]\nname = "other"\nmodel = "qwen3_5-2b"\ntrace_out = "ck/config.json"\n',
            "grid[1].trace_out",
        ),
    ],
    ids=["own", "another-cells"],
)
def test_a_trace_out_in_a_cells_model_directory_is_refused_before_any_cell_runs(tmp_path: Path, grids, key):
    # it passed: written over the checkpoint's config.json, the model loaded no more
    path = _checkpoint_config(tmp_path)
    path.write_text(path.read_text() + grids)
    before = (tmp_path / "exp" / "ck" / "config.json").read_bytes()
    with pytest.raises(ExperimentConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert f": {key}: " in message and "inside the model directory of grid[0].model" in message, message
    assert (tmp_path / "exp" / "ck" / "config.json").read_bytes() == before


def test_a_profile_file_under_home_is_found_in_a_config(tmp_path: Path, monkeypatch):
    # hardware = "~/p.json" was read as a folder named "~" beside the config: "cannot read"
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # it would move the cache past HOME

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    save_profile(HARDWARE["h200"], tmp_path / "home" / "p.json")
    path = tmp_path / "exp" / "t.toml"
    path.parent.mkdir()
    path.write_text(ONE_CELL.replace('hardware = "h200"', 'hardware = "~/p.json"'))
    (cell,) = load_config(path).cells
    assert cell.settings["hardware"] == str(tmp_path / "home" / "p.json")


def test_a_trace_out_is_relative_to_the_config_as_every_file_it_names(tmp_path: Path, monkeypatch):
    # a relative trace_out was written in the current directory (the docs: a file a cell names by
    # a relative path is found beside the config, wherever the command runs), and "~/t.json" in
    # a folder named "~" there
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)  # it would move the cache past HOME
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "exp").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    expected_at = {"t.json": tmp_path / "exp" / "t.json", "~/t.json": tmp_path / "home" / "t.json"}
    for given, expected in expected_at.items():
        path = tmp_path / "exp" / "t.toml"
        path.write_text(ONE_CELL + f'trace_out = "{given}"\n')
        (cell,) = load_config(path).cells
        assert cell.settings["trace_out"] == str(expected), given


@pytest.mark.parametrize("given, named", [("t.toml", "the config"), ("p.json", "hardware")])
def test_a_trace_out_that_names_a_file_the_cell_reads_is_refused_and_the_file_kept(
    tmp_path: Path, given: str, named: str
):
    # trace_out = "p.json" beside hardware = "p.json" (or the config itself) passed, and the cell's
    # trace then replaced the profile (or the config), where `bench --hardware p.json --trace-out
    # p.json` is refused
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    save_profile(HARDWARE["h200"], tmp_path / "p.json")
    path = tmp_path / "t.toml"
    path.write_text(ONE_CELL.replace('hardware = "h200"', 'hardware = "p.json"') + f'trace_out = "{given}"\n')
    before = {p: p.read_bytes() for p in (path, tmp_path / "p.json")}
    with pytest.raises(ExperimentConfigError, match=rf"trace_out: .*{given}.*the same file as {named}"):
        load_config(path)
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize(
    ("reader", "named"),
    [('name = "models"', "grid[0]"), ('name = "load"', "grid[2]")],
    ids=["earlier", "later"],
)
def test_a_trace_out_that_names_a_file_another_cell_reads_is_refused_and_the_file_kept(
    tiny: Path, tmp_path: Path, reader: str, named: str
):
    # only the cell's own files were checked: one cell's trace_out = "p.json" beside another
    # cell's hardware = "p.json" passed, and the trace replaced that cell's profile
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    profile = tmp_path / "p.json"
    save_profile(HARDWARE["h200"], profile)
    before = profile.read_bytes()
    edits = [
        (reader, f'{reader}\nhardware = "p.json"'),
        ("fixed_cost_ms = [0, 20]", 'fixed_cost_ms = 0\ntrace_out = "p.json"'),
    ]
    message = refusal(tiny, edits)
    assert ": grid[1].trace_out: " in message and f"the same file as {named}.hardware" in message, message
    assert profile.read_bytes() == before


def test_a_model_directory_only_in_the_current_directory_is_not_taken(tmp_path: Path, monkeypatch):
    path = _checkpoint_config(tmp_path)
    _checkpoint(tmp_path / "elsewhere" / "ck2")
    path.write_text(path.read_text().replace('"ck"\n', '"ck2"\n'))
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(ExperimentConfigError, match=r"grid\[0\]\.model: .*exp/ck2"):
        load_config(path)


def _rewritten_at_the_same_size(ck: Path) -> None:
    import os

    weights = ck / "model.safetensors"
    before = weights.stat().st_mtime_ns
    weights.write_bytes(b"WEIGHTS")  # the same size: only its modification time tells
    os.utime(weights, ns=(before + 10**9, before + 10**9))


@pytest.mark.parametrize(
    "edit",
    [
        lambda ck: (ck / "config.json").write_text((ck / "config.json").read_text().replace(", ", ",  ")),
        lambda ck: (ck / "model.safetensors").write_bytes(b"other weights"),
        lambda ck: (ck / "model-00002.safetensors").write_bytes(b"another shard"),
        _rewritten_at_the_same_size,
        lambda ck: (ck / "generation_config.json").write_text('{"eos_token_id": 2}'),  # stop ids
        lambda ck: (ck / "tokenizer_config.json").write_text('{"eos_token": "a"}'),  # its stop id
    ],
    ids=[
        "config",
        "weights",
        "a weight file added",
        "weights of the same size",
        "generation config",
        "tokenizer",
    ],
)
def test_a_cell_on_a_model_directory_runs_again_when_the_checkpoint_changes(tmp_path: Path, edit):
    # its key was the path's text: new weights or config at the same path gave the old results
    from radixflow.experiments.execute import execute

    path = _checkpoint_config(tmp_path)
    started: list[tuple[int, int]] = []
    out = tmp_path / "out"

    def run() -> None:
        execute(load_config(path), out, ExecutionOptions(), lambda *n: started.append(n))

    run()
    run()
    edit(path.parent / "ck")
    run()
    assert started == [(0, 1), (1, 0), (0, 1)]


def test_a_torch_cell_runs_again_when_its_model_is_calibrated_anew(tmp_path: Path, monkeypatch):
    # the torch runner starts its round predictor (which the policies cut rounds by) from the
    # profile `radixflow calibrate` stored for the model: a new one reused the old results
    pytest.importorskip("torch")
    from dataclasses import replace

    from radixflow.costmodel.hardware.profiles import HARDWARE
    from radixflow.experiments import execute as execute_module
    from radixflow.models.zoo import default_cache_dir, ensure_model
    from radixflow.runners.profile_store import StoreKey, model_identity, save_stored

    built = ensure_model("lfm2-tiny")  # once, where the other tests find it
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path / "cache"))  # its profile store: this test's
    default_cache_dir().mkdir()
    (default_cache_dir() / "lfm2-tiny").symlink_to(built)
    ran = {"results": [{"variant": v} for v in ("native", "radixflow")]}  # a result per variant
    monkeypatch.setattr(execute_module, "run_cell", lambda cell, variants: ran)
    path = tmp_path / "t.toml"
    path.write_text(TORCH.replace('cost_profile = "cpu.json"\n', ""))
    started: list[tuple[int, int]] = []

    def run() -> None:
        config = load_config(path)
        execute_module.execute(config, tmp_path / "out", ExecutionOptions(), lambda *n: started.append(n))

    key = StoreKey(model_identity(built, "float32"), {"cpu": "this one"})
    config = load_config(path)
    assert config.cells[0].key(config.variants) == "c097af295fcc6de3"  # none stored: no round profiles in it
    run()
    save_stored(HARDWARE["cpu"], key)
    run()
    run()
    save_stored(replace(HARDWARE["cpu"], per_request_s=2e-3), key)
    run()
    assert started == [(0, 1), (0, 1), (1, 0), (0, 1)]


def test_a_missing_model_path_is_named_where_it_was_looked_for(tmp_path: Path, monkeypatch):
    # "unknown sim model 'sub/ck'" left the user to guess which folder it was relative to
    path = _checkpoint_config(tmp_path)
    path.write_text(path.read_text().replace('"ck"\n', '"sub/ck"\n'))
    monkeypatch.chdir(tmp_path)
    where = (tmp_path / "exp" / "sub" / "ck").resolve()
    with pytest.raises(ExperimentConfigError, match=re.escape(f"{where}'")):
        load_config(path)


def test_a_cached_cell_run_without_its_trace_names_no_trace(tiny: Path, tmp_path: Path):
    # the cell's result came from the cache as the traced run wrote it: results.json named that
    # run's trace_out though this run asked for none and wrote none
    from radixflow.experiments.execute import execute

    out, trace = tmp_path / "out", tmp_path / "cell.json"
    tiny.write_text(ONE_CELL + f'trace_out = "{trace}"\n')
    execute(load_config(tiny), out, ExecutionOptions())
    tiny.write_text(ONE_CELL)
    (plain,) = execute(load_config(tiny), out, ExecutionOptions())
    assert plain["cell"]["trace_out"] is None


class _Ray:
    """Enough of ray for `execute._ray`: a cluster whose largest node has ``cpus`` CPUs; records
    the CPUs each task asks for (its tasks return at once)."""

    exceptions: Any = None  # ray.exceptions, where a test has a task's worker die

    def __init__(self, cpus: float, crashed: int | None = None, raised: int | None = None) -> None:
        self.cpus, self.asked, self.crashed, self.raised, self.refs = cpus, [], crashed, raised, []

    def init(self, **kwargs) -> None:
        self.init_kwargs = kwargs

    def nodes(self) -> list[dict]:
        return [{"Alive": True, "Resources": {"CPU": self.cpus}}, {"Alive": False, "Resources": {"CPU": 64}}]

    def remote(self, fn):
        ray = self

        class Task:
            def options(self, num_cpus):
                ray.asked.append(num_cpus)
                return self

            def remote(self, *args):
                ray.refs.append(object())
                return ray.refs[-1]

        return Task()

    def wait(self, refs, num_returns):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref) -> dict:
        if self.crashed is not None and ref is self.refs[self.crashed]:
            raise self.exceptions.WorkerCrashedError()
        if self.raised is not None and ref is self.refs[self.raised]:
            cause = RuntimeError("CUDA out of memory")
            raise self.exceptions.RayTaskError("_run_one", "...", cause, "worker", 1, "127.0.0.1")
        return {}

    def shutdown(self) -> None:
        pass


@pytest.mark.parametrize("cpus, asked", [(1.0, [1.0, 1.0, 1]), (8.0, [2, 4, 1]), (3.0, [2, 3.0, 1])])
def test_a_torch_cell_on_ray_asks_for_no_more_cpus_than_a_node_has(monkeypatch, cpus, asked):
    # a torch cell asked for 2 CPUs whatever the cluster: on a 1-CPU machine (or a cluster of
    # 1-CPU nodes) Ray could never place it, and `experiment --ray` waited forever; one with
    # torch_threads = 4 got 2, so cells timed on the same node took each other's CPUs
    from types import SimpleNamespace

    from radixflow.experiments import execute

    ray = _Ray(cpus)
    monkeypatch.setitem(sys.modules, "ray", ray)
    settings = [("torch", None), ("torch", 4), ("sim", 4)]
    cells = [SimpleNamespace(settings={"runner": r, "torch_threads": t}) for r, t in settings]
    pending = [execute.Pending(f"k{i}", c) for i, c in enumerate(cells)]  # type: ignore[arg-type]
    assert len(list(execute._ray(pending, [], None, torch_cpus=2))) == 3
    assert ray.asked == asked


@pytest.mark.parametrize("found", ["RAY_ADDRESS", "ray start"])
def test_ray_without_an_address_starts_a_local_instance_whatever_cluster_is_known(monkeypatch, found):
    # `--ray` without --ray-address called ray.init(address=None), which joins the cluster in
    # $RAY_ADDRESS or one `ray start` left on this machine: the cells ran there, although
    # docs/reproducing.md says `--ray` starts a local instance (--ray-address ADDR joins a cluster)
    pytest.importorskip("ray")
    from ray._private import services

    from radixflow.experiments import execute

    if found == "RAY_ADDRESS":
        monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    else:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
        monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: "head:6379")
    monkeypatch.setattr(execute, "unreachable", lambda address: None)  # "head:6379" is no host here
    ray = _Ray(2.0)
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert list(execute._ray([], [], None, torch_cpus=2)) == []
    address = ray.init_kwargs["address"]  # what ray.init does with it: $RAY_ADDRESS replaces None
    if address in (None, "auto") and "RAY_ADDRESS" in os.environ:
        address = os.environ["RAY_ADDRESS"]
    assert services.canonicalize_bootstrap_address(address, None) is None  # None: a new instance
    assert list(execute._ray([], [], "head:6379", torch_cpus=2)) == []
    assert ray.init_kwargs["address"] == "head:6379"  # --ray-address still joins


@pytest.mark.parametrize("ours", [None, "/work/checkout"])
def test_ray_workers_keep_the_pythonpath_their_nodes_give_them(monkeypatch, ours):
    # the runtime env set the workers' PYTHONPATH to this process's ("" when it had none): on a
    # cluster whose nodes find radixflow through their own PYTHONPATH every cell failed to import it
    pytest.importorskip("ray")
    from ray._private.utils import update_envs

    from radixflow.experiments import execute

    if ours is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", ours)
    monkeypatch.setattr(execute, "unreachable", lambda address: None)  # "head:6379" is no host here
    ray = _Ray(2.0)
    monkeypatch.setitem(sys.modules, "ray", ray)
    assert list(execute._ray([], [], "head:6379", torch_cpus=2)) == []
    monkeypatch.setenv("PYTHONPATH", "/app")  # a node's own, as Ray's worker setup finds it there
    update_envs({"PYTHONPATH": ray.init_kwargs["runtime_env"]["env_vars"]["PYTHONPATH"]})
    paths = os.environ["PYTHONPATH"].split(os.pathsep)
    assert "/app" in paths and (ours is None or paths[0] == ours)


def test_a_cell_whose_ray_worker_died_fails_alone_naming_it(monkeypatch):
    # a worker killed under a cell (the kernel's OOM killer) raised Ray's WorkerCrashedError out
    # of the run: a traceback naming no cell, the cells still running on other workers dropped
    pytest.importorskip("ray")
    from types import SimpleNamespace

    from radixflow.experiments import execute

    ray = _Ray(2.0, crashed=0)
    ray.exceptions = pytest.importorskip("ray.exceptions")
    monkeypatch.setitem(sys.modules, "ray", ray)
    settings = {"runner": "sim", "model": "m"}
    cells = [SimpleNamespace(settings=settings, group="g", workload={"seed": s}) for s in (1, 2)]
    pending = [execute.Pending(f"k{i}", c) for i, c in enumerate(cells)]  # type: ignore[arg-type]
    outcomes = dict((p.key, o) for p, o in execute._ray(pending, [], None, torch_cpus=2))
    assert outcomes["k1"] == {}
    why = outcomes["k0"]
    assert isinstance(why, str) and why.startswith("cell 'g' (m, seed 1, key k0): its Ray worker died: ")
    assert "\n" not in why


def test_a_ray_error_with_no_message_still_fails_its_cell_alone(monkeypatch):
    # the first line of an empty message was an IndexError out of the run, every cell lost
    pytest.importorskip("ray")
    from types import SimpleNamespace

    from radixflow.experiments import execute

    ray = _Ray(2.0)
    ray.exceptions = pytest.importorskip("ray.exceptions")

    def get(ref: object) -> dict:
        if ref is ray.refs[0]:
            raise ray.exceptions.RayError()
        return {}

    ray.get = get  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "ray", ray)
    settings = {"runner": "sim", "model": "m"}
    cells = [SimpleNamespace(settings=settings, group="g", workload={"seed": s}) for s in (1, 2)]
    pending = [execute.Pending(f"k{i}", c) for i, c in enumerate(cells)]  # type: ignore[arg-type]
    outcomes = dict((p.key, o) for p, o in execute._ray(pending, [], None, torch_cpus=2))
    assert outcomes == {"k0": "cell 'g' (m, seed 1, key k0): its Ray worker died: RayError", "k1": {}}


def test_a_cell_that_crashes_on_ray_keeps_the_cells_that_finished_beside_it(monkeypatch):
    # a cell whose code raised on its Ray worker (a bug, a GPU out of memory) was raised at once:
    # the cells that had finished on the other workers, not yet read back, were never cached, and
    # those still running were dropped with the cluster. Now they are yielded (and cached) first.
    pytest.importorskip("ray")
    from types import SimpleNamespace

    from radixflow.experiments import execute

    ray = _Ray(2.0, raised=0)
    ray.exceptions = pytest.importorskip("ray.exceptions")
    monkeypatch.setitem(sys.modules, "ray", ray)
    settings = {"runner": "sim", "model": "m"}
    cells = [SimpleNamespace(settings=settings, group="g", workload={"seed": s}) for s in (1, 2, 3)]
    pending = [execute.Pending(f"k{i}", c) for i, c in enumerate(cells)]  # type: ignore[arg-type]
    got = []
    with pytest.raises(ray.exceptions.RayTaskError) as info:
        for p, outcome in execute._ray(pending, [], None, torch_cpus=2):
            got.append((p.key, outcome))
    assert got == [("k1", {}), ("k2", {})] and str(info.value.cause) == "CUDA out of memory"


@pytest.mark.parametrize("scheme", ["", "ray://"])
def test_a_ray_address_nothing_listens_at_is_refused_at_once(monkeypatch, scheme):
    # ray.init retried an address with nothing listening for minutes on end, a warning every few
    # seconds and never an error: `--ray-address 127.0.0.1:1` looked hung
    import socket

    from radixflow.experiments import execute

    ray = _Ray(2.0)
    monkeypatch.setitem(sys.modules, "ray", ray)
    with socket.socket() as closed, socket.socket() as listening:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: a connection is refused
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"{scheme}127.0.0.1:{closed.getsockname()[1]}"
        with pytest.raises(execute.RayStartError, match=rf"^--ray-address {address}: Ray did not start: "):
            list(execute._ray([], [], address, torch_cpus=2))
        assert not hasattr(ray, "init_kwargs")  # refused before ray.init
        address = f"{scheme}127.0.0.1:{listening.getsockname()[1]}"
        assert list(execute._ray([], [], address, torch_cpus=2)) == []
        assert ray.init_kwargs["address"] == address


def test_two_spellings_of_one_file_in_a_swept_key_are_refused_as_one_cell_twice(tiny: Path, tmp_path: Path):
    # "p.json" and "./p.json" passed the repeat check, resolved to one cell under one key: it ran
    # once, a fresh run said "1 run, 1 from cache", and results.json and the report held it twice
    from radixflow.costmodel.hardware.profile_files import save_profile
    from radixflow.costmodel.hardware.profiles import HARDWARE

    save_profile(HARDWARE["h200"], tmp_path / "p.json")
    swept = 'model = "qwen3_5-2b"\nhardware = ["p.json", "./p.json"]'
    tiny.write_text(TINY.replace('model = ["qwen3_5-2b", "qwen3-4b"]', swept))
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    message = str(info.value)
    assert message.startswith(f"{tiny}: grid[0].hardware: 'p.json' and './p.json' ") and "\n" not in message


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (("[defaults]", '[defaults]\npolicies = ["native"]'), "defaults.policies"),
        (("[defaults]", '[defaults]\ndescription = "x"'), "defaults.description"),
        (("[defaults]", '[defaults]\nname = "x"'), "defaults.name"),
        (('name = "models"', 'name = "models"\npolicies = ["native"]'), "grid[0].policies"),
        (('name = "models"', 'name = "models"\ndescription = "x"'), "grid[0].description"),
    ],
)
def test_a_top_level_key_under_a_table_is_refused_pointing_where_it_goes(tiny: Path, edit, key):
    # `policies = [...]` written below [defaults] is the table's key in TOML: it was "unknown key
    # (known: model, runner, ...)", though `policies` is a key, of the config
    message = refusal(tiny, [edit])
    assert "\n" not in message and f": {key}: " in message and "unknown key" not in message, message
    assert "top level" in message and "before the first table" in message, message


@pytest.mark.parametrize(
    ("line", "key", "says"),
    [
        ("token_budget = 512", "token_budget", "[defaults] (every grid's) or in a [[grid]]"),
        ("workload = {}", "workload", "[defaults] (every grid's) or in a [[grid]]"),
        ("seed = 3", "seed", "`seeds`"),
    ],
)
def test_a_cell_key_at_the_top_level_is_refused_pointing_at_defaults(tiny: Path, line, key, says):
    # it was "unknown key (known: defaults, description, grid, ...)", though it is a cell's key
    message = refusal(tiny, [("seeds = [0]", f"seeds = [0]\n{line}")])
    assert "\n" not in message and f": {key}: " in message and "unknown key" not in message, message
    assert says in message, message


def test_a_torch_cell_runs_again_when_its_zoo_model_built_beside_another_versions_is_calibrated(
    tmp_path: Path, monkeypatch
):
    # where <cache>/<name> holds another radixflow version's build, the zoo builds this one's beside
    # it (<cache>/<name>.<digest>), and calibrate and the runner store and find that one's profiles;
    # the key read <cache>/<name>'s only, so a model calibrated anew reused the old results
    pytest.importorskip("torch")
    import shutil

    from radixflow.costmodel.hardware.profiles import HARDWARE
    from radixflow.models.zoo import default_cache_dir, ensure_model
    from radixflow.models.zoo_record import RECORD
    from radixflow.runners.profile_store import StoreKey, model_identity, save_stored

    built = ensure_model("lfm2-tiny")  # once, where the other tests find it
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path / "cache"))
    home = default_cache_dir() / "lfm2-tiny"
    shutil.copytree(built, home)
    record = json.loads((home / RECORD).read_text())
    (home / RECORD).write_text(json.dumps({**record, "digest": "another version's"}))
    path = tmp_path / "t.toml"
    path.write_text(TORCH.replace('cost_profile = "cpu.json"\n', ""))
    config = load_config(path)  # builds this version's beside it
    (beside,) = default_cache_dir().glob("lfm2-tiny.*")
    assert ensure_model("lfm2-tiny") == beside
    before = config.cells[0].key(config.variants)
    save_stored(HARDWARE["cpu"], StoreKey(model_identity(beside, "float32"), {"cpu": "this one"}))
    assert config.cells[0].key(config.variants) != before


@pytest.mark.parametrize(
    ("edits", "key"),
    [
        ([('model = "qwen3_5-2b"\n', "")], "defaults.model"),  # "grid[0].model: missing"
        ([("max_requests = 16", "max_requests = 16\nkv_blocks = 4")], "defaults.kv_blocks"),
    ],
)
def test_a_config_without_grids_names_its_keys_in_defaults(tiny: Path, edits, key):
    # a config of [defaults] alone (one implicit grid) was told of "grid[0].model" and the like: a
    # table it does not have
    text = TINY.split("\n[[grid]]")[0].replace("[defaults]", '[defaults]\nmodel = "qwen3_5-2b"', 1)
    for edit in edits:
        text = text.replace(*edit, 1)
    tiny.write_text(text)
    with pytest.raises(ExperimentConfigError) as info:
        load_config(tiny)
    assert f": {key}: " in str(info.value) and "grid[0]" not in str(info.value), str(info.value)


def test_the_cost_check_prices_each_recorded_chunk_as_the_engine_ran_it():
    """A decode step was priced without the output head (sample=False: only a prompt's last chunk
    sampled) though every decode step samples, so a profile that charges the head predicted too
    little; each recorded chunk is now the chunk the engine ran (its snapshots aside: not recorded,
    and a fitted CPU profile charges no memory traffic)."""
    from dataclasses import replace

    from engine_utils import new_engine

    from radixflow.costmodel.hardware.profiles import HARDWARE
    from radixflow.costmodel.round_cost.by_profile import round_cost_model
    from radixflow.experiments.costcheck import predicted_worker_s, round_chunks
    from radixflow.runners.sim import SIM_MODELS, SimRunner, chunk_shapes
    from radixflow.scheduler import Request, SchedulerConfig
    from radixflow.scheduler.sampling import SamplingParams

    shape = SIM_MODELS["qwen3_5-2b"]
    sim, ran = SimRunner(shape, HARDWARE["cpu"]), []

    class Recording:  # the sim runner, keeping the chunks of each call as the cost model sees them
        name, model, round_predictor = sim.name, sim.model, None
        validate, reference_tokens = sim.validate, sim.reference_tokens

        def run(self, batch):
            ran.append([replace(c, snapshots=0, head_rows=0, wave=0) for c in chunk_shapes(batch.chunks)])
            return sim.run(batch)

    config = SchedulerConfig(token_budget=16, max_requests=4, block_size=8, num_blocks=64, num_state_slots=16)
    prompt = tuple(range(1, 41))
    four = SamplingParams(max_tokens=4)
    requests = [Request(f"r{i}", prompt[: 30 + i * 5], sampling=four) for i in range(3)]
    engine = new_engine(Recording(), config)
    engine.run(requests)
    prompt_len = {r.id: len(r.prompt) for r in requests}
    rounds = list(engine.rounds)
    assert len(rounds) == len(ran) and any(c.decode for chunks in ran for c in chunks)
    for record, chunks in zip(rounds, ran, strict=True):
        assert round_chunks(record, prompt_len, shape.has_recurrent) == chunks, record.index
    model = round_cost_model(shape, HARDWARE["cpu"])
    want = sum(model.breakdown(chunks).worker_call_s for chunks in ran)
    assert predicted_worker_s(rounds, prompt_len, shape, "cpu") == pytest.approx(want)


@pytest.mark.parametrize(
    ("edit", "key", "says"),
    [
        (("candidate_len = 16", "candidate_len = 16\ntoken_budget = 512"), "defaults.workload.token_budget",
         "in [defaults], above [defaults.workload]"),
        (('rate = [10.0, 1000.0]', 'rate = [10.0, 1000.0]\nmodel = "qwen3-4b"'), "grid[2].workload.model",
         "in its [[grid]], above [grid.workload]"),
        (('rate = [10.0, 1000.0]', 'rate = [10.0, 1000.0]\nseeds = [1]'), "grid[2].workload.seeds",
         "in its [[grid]], above [grid.workload]"),
        (("[defaults]", "[defaults]\ngroups = 4"), "defaults.groups", "under [defaults.workload]"),
        (('name = "models"', 'name = "models"\narrival = "poisson"'), "grid[0].arrival",
         "under [grid.workload]"),
    ],
)  # fmt: skip
def test_a_key_in_the_wrong_one_of_a_table_and_its_workload_says_where_it_goes(tiny: Path, edit, key, says):
    # TOML reads a key written below [grid.workload] into the workload: it was "unknown key
    # (known: groups, candidates, ...)", a list without the cell key the user meant to set
    message = refusal(tiny, [edit])
    assert "\n" not in message and f": {key}: " in message and "unknown key" not in message, message
    assert says in message, message


def test_a_fleet_cells_policy_counters_are_its_replicas_summed(tiny: Path, monkeypatch):
    # a fleet cell's result had `policy_counters: {}` whatever its replicas' policies decided:
    # an adaptive fleet read as one that never waited, followed or recomputed
    from radixflow.experiments import cells

    runs = []

    def recorded(*args, **kwargs):
        runs.append(run_fleet(*args, **kwargs))
        return runs[-1]

    run_fleet = cells.run_fleet
    monkeypatch.setattr(cells, "run_fleet", recorded)
    fleet = TINY.replace('policies = ["native", "radixflow"]', 'policies = ["adaptive"]', 1)
    fleet = fleet.replace("[defaults]", "[defaults]\nreplicas = 2", 1)
    tiny.write_text(fleet.replace("groups = 2", 'groups = 6\nkind = "chats"', 1))
    config = load_config(tiny)
    (result,) = cells.run_cell(config.cells[0], config.variants)["results"]
    (run,) = runs
    summed: dict[str, int] = {}
    for replica in run.replicas:
        for name, count in replica.engine.scheduler.policy.counters().items():
            summed[name] = summed.get(name, 0) + count
    assert summed and result["policy_counters"] == summed


@pytest.mark.parametrize(
    "edit, says",
    [
        ("candidate_len = -1", "defaults.workload.candidate_len: must be at least 1, got -1"),
        (
            "candidate_len = 16\nrate = -5.0",
            "defaults.workload.rate: must be at least 1e-06 requests/s, got -5.0",
        ),
        ("candidate_len = 16\nburst_size = -2", "defaults.workload.burst_size: must be at least 1, got -2"),
        ("candidate_len = 16\nnamespaces = -1", "defaults.workload.namespaces: must be at least 1, got -1"),
        ("candidate_len = 16\nskew = -0.5", "defaults.workload.skew: must be at least 0, got -0.5"),
    ],
)
def test_a_negative_workload_value_is_refused_with_its_own_least_value(tiny: Path, edit, says):
    # every negative value was "must be >= 0": a candidate_len, burst_size or namespaces of 0 (or a
    # rate of 0) written from it was then refused again, with the real bound
    tiny.write_text(TINY.replace("candidate_len = 16", edit, 1))
    with pytest.raises(ExperimentConfigError, match=re.escape(says)):
        load_config(tiny)
