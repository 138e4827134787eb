"""`radixflow experiment`, `radixflow calibrate` and `bench --hardware FILE` through the command line."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_utils import checkout_env
from signal_utils import time_limit

from radixflow.cli import main
from radixflow.costmodel.hardware.profile_files import save_profile
from radixflow.costmodel.hardware.profiles import HARDWARE

CONFIG = """
name = "cli"
[defaults]
model = "qwen3_5-2b"
token_budget = 256
[defaults.workload]
groups = 2
candidates = 2
context_len = 64
candidate_len = 16
"""


def test_experiment_command_writes_results_and_skips_cached_cells(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert "1 run, 0 from cache" in capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert doc["variants"] == ["native", "radixflow"] and len(doc["cells"]) == 1
    assert (out / "report.md").exists() and (out / "latency_cdf.png").exists()
    assert "1 cell; variants" in (out / "report.md").read_text()  # it said "1 cells"
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert "1 cell (0 run, 1 from cache)" in capsys.readouterr().out


def test_a_rerun_warns_of_cells_other_code_computed(tmp_path, capsys):
    # the cache's cells of an earlier radixflow were taken without a word (a key leaves the code out)
    config, out = tmp_path / "c.toml", tmp_path / "out"
    config.write_text(CONFIG)
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert "warning" not in capsys.readouterr().err
    (cached,) = (out / "cells").glob("*.json")
    cached.write_text(json.dumps(json.loads(cached.read_text()) | {"code": "0123456789abcdef"}))
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("radixflow:")]
    assert len(said) == 1 and said[0].startswith(
        "radixflow: warning: 1 of 1 cell came from the cache of other code than this run's"
    ), said


def test_the_summary_names_the_output_directory_as_given(tmp_path, capsys):
    # the line was read as rich markup: --out "o[red]" was shown as "o/results.json" (a path that
    # is not there), and "o[/x]" ended a finished run with a MarkupError traceback
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    for name in ("o[red]", "o[/x]"):
        out = tmp_path / name
        assert main(["experiment", str(config), "--out", str(out)]) == 0
        assert f"{out / 'results.json'}, {out / 'report.md'}" in capsys.readouterr().out


def test_an_interrupted_experiment_says_its_finished_cells_are_kept_and_a_rerun_resumes(
    tmp_path, capsys, monkeypatch
):
    # a Ctrl-C said only "radixflow: interrupted", not that the finished cells are kept
    from radixflow.experiments import execute

    real, calls = execute.run_cell, []

    def second_interrupted(cell, variants):
        calls.append(cell)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(cell, variants)

    monkeypatch.setattr(execute, "run_cell", second_interrupted)
    config = tmp_path / "c.toml"
    config.write_text(_grid("token_budget = [256, 512]"))
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"radixflow: interrupted; 1 of 2 cells finished, kept in {out / 'cells'}: "
        f"radixflow experiment {config} --out {out} runs only the rest"
    )
    monkeypatch.setattr(execute, "run_cell", real)
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert "2 cells (1 run, 1 from cache)" in capsys.readouterr().out


def test_an_interrupted_rerun_does_not_count_a_traced_cell_as_kept(tmp_path, capsys, monkeypatch):
    # a cell with a trace_out runs again on every run (only a run writes its trace): the line
    # counted its cached result as finished, "2 of 2 cells finished ... runs only the rest", though
    # the command it gives runs both again
    from radixflow.experiments import execute

    config, out = tmp_path / "c.toml", tmp_path / "out"
    config.write_text(_grid('name = "traced"', 'trace_out = "t.jsonl"', "[[grid]]", 'name = "plain"'))
    assert main(["experiment", str(config), "--out", str(out)]) == 0

    def interrupted(cell, variants):
        raise KeyboardInterrupt

    monkeypatch.setattr(execute, "run_cell", interrupted)
    capsys.readouterr()
    assert main(["experiment", str(config), "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"radixflow: interrupted; 1 of 2 cells finished, kept in {out / 'cells'}: "), err
    assert "runs only the rest (the cell with a trace_out runs again)" in err, err


def test_a_sigterm_during_a_ray_run_keeps_the_finished_cells_as_a_serial_run_does(
    tmp_path, capsys, monkeypatch
):
    # ray.init installs a SIGTERM handler of its own (sys.exit(15)) over the one taking SIGTERM
    # as a Ctrl-C: the run ended with status 15, not a word of the cells it had finished
    ray = pytest.importorskip("ray")
    wait, calls = ray.wait, []

    def second_terminated(*args, **kwargs):  # once the first cell's result is kept
        calls.append(args)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return wait(*args, **kwargs)

    monkeypatch.setattr(ray, "wait", second_terminated)
    before = signal.getsignal(signal.SIGTERM)
    config = tmp_path / "c.toml"
    config.write_text(_grid("token_budget = [256, 512]"))
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--out", str(out), "--ray"]) == 143
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"radixflow: terminated; 1 of 2 cells finished, kept in {out / 'cells'}")
    assert signal.getsignal(signal.SIGTERM) is before


def test_an_interrupted_run_says_the_results_in_its_out_are_an_earlier_runs(tmp_path, capsys, monkeypatch):
    # a Ctrl-C kept the earlier run's results.json and report.md whole (perhaps of another
    # config), and said nothing of them: they read as this run's
    from radixflow.experiments import execute

    config, out = tmp_path / "c.toml", tmp_path / "o"
    config.write_text(CONFIG)
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    before = (out / "results.json").read_text()

    def interrupted(cell, variants):
        raise KeyboardInterrupt

    monkeypatch.setattr(execute, "run_cell", interrupted)
    config.write_text(CONFIG.replace("token_budget = 256", "token_budget = 128"))  # another cell
    capsys.readouterr()
    assert main(["experiment", str(config), "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"radixflow: interrupted; 0 of 1 cell finished, kept in {out / 'cells'}: radixflow experiment "
        f"{config} --out {out} runs only the rest; results.json, report.md in {out} are an earlier run's"
    )
    assert (out / "results.json").read_text() == before  # kept whole


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (CONFIG.replace("groups = 2", "groups = -2"), "defaults.workload.groups"),
        (CONFIG + "\n[[grid]]\nrunner = 'gpu'\n", "grid[0].runner"),
        ("name = 'x'\nseeds = 3\n", "seeds"),
        # a workload too large names the largest of its factors (it named no key; test_bad_inputs)
        (
            CONFIG + "\n[[grid]]\nworkload.shared_prefix_len = [16776129]\n",
            "grid[0].workload.shared_prefix_len",
        ),
        # a NUL in a path used to reach os.path as "ValueError: embedded null byte"
        *(
            (CONFIG + f'\n[[grid]]\n{key} = ["a\\u0000b"]\n', f"grid[0].{key}")
            for key in ("hardware", "cost_profile", "trace_out")
        ),
    ],
)
def test_bad_experiment_config_is_one_line_and_exit_2(tmp_path, capsys, text, needle):
    config = tmp_path / "c.toml"
    config.write_text(text)
    assert main(["experiment", str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: ") and needle in err and "\n" not in err


def test_bench_accepts_a_profile_file_and_refuses_a_broken_one(tmp_path, capsys):
    profile = tmp_path / "p.json"
    save_profile(HARDWARE["h200"], profile)
    out = tmp_path / "r.json"
    assert main(["bench", "--hardware", str(profile), "--groups", "2", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["hardware"]["bandwidth"] == 4.8e12
    profile.write_text("{}")
    assert main(["bench", "--hardware", str(profile)]) == 2
    assert "'flops'" in capsys.readouterr().err


def test_calibrate_tiny_model_writes_a_usable_profile(tmp_path, capsys, zoo):
    pytest.importorskip("torch")
    profile = tmp_path / "cpu.json"
    args = ["--max-tokens", "256", "--held-out", "2", "--repeats", "1", "--out", str(profile)]
    assert main(["calibrate", "--model", "lfm2-tiny", *args]) == 0
    shown = capsys.readouterr().out
    assert "lfm2-tiny" in shown and "median error" in shown
    data = json.loads(profile.read_text())
    assert data["calibration"]["errors"][0]["held_out_rounds"] == 2 and data["bandwidth"] is None
    assert main(["bench", "--hardware", str(profile), "--groups", "2"]) == 0
    # the model's own fit, where the torch runner looks for it on this machine (one thread timed)
    from radixflow.models.zoo import ensure_model
    from radixflow.runners.profile_store import RunnerSettings, load_stored, store_key

    # keyed by the kernels and matmul routes the timing ran on, as the profile records them
    settings = RunnerSettings(**data["calibration"]["runners"]["lfm2-tiny"])
    stored = load_stored(store_key(ensure_model("lfm2-tiny"), "float32", "cpu", 1, settings))
    assert stored is not None and stored.round_overhead_s == pytest.approx(data["round_overhead_s"])


def test_calibrate_in_bfloat16_stores_the_fit_a_bfloat16_runner_starts_from(tmp_path, capsys, monkeypatch):
    """calibrate had no --dtype: it timed and stored float32 only, so a run in bfloat16 (CUDA's
    default) never found a profile and always started from the nominal prior."""
    pytest.importorskip("torch")
    import torch

    from radixflow.models.zoo import ensure_model
    from radixflow.runners.profile_store import RunnerSettings, load_stored, store_key
    from radixflow.runners.torch_runner import TorchRunner

    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path / "cache"))  # the store too: no other test finds it
    profile = tmp_path / "bf16.json"
    args = ["--max-tokens", "256", "--held-out", "2", "--repeats", "1", "--out", str(profile)]
    assert main(["calibrate", "--model", "lfm2-tiny", "--dtype", "bfloat16", *args]) == 0
    assert "in bfloat16 on cpu" in " ".join(capsys.readouterr().out.split())
    data = json.loads(profile.read_text())
    assert data["weight_bytes"] == 2
    path = ensure_model("lfm2-tiny")
    settings = RunnerSettings(**data["calibration"]["runners"]["lfm2-tiny"])
    assert settings.matmul is None  # no plan routes bfloat16's matmuls
    assert load_stored(store_key(path, "bfloat16", "cpu", 1, settings)) is not None
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runner = TorchRunner(path, 16, 16, 4, dtype=torch.bfloat16)
    finally:
        torch.set_num_threads(threads)
    assert runner.round_predictor is not None and runner.round_predictor.source.startswith("profile")


def test_calibrate_names_its_output_as_given(tmp_path, capsys, zoo, monkeypatch):
    # its closing lines were read as rich markup: --out "p[red].json" was shown as "p.json"; and
    # the command it suggests named the file unquoted, so "my p.json" pasted was two arguments
    import shlex

    pytest.importorskip("torch")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path / "cache"))  # the store too: no other test finds it
    profile = tmp_path / "my p[red].json"
    args = ["--max-tokens", "256", "--held-out", "2", "--repeats", "1", "--out", str(profile)]
    assert main(["calibrate", "--model", "lfm2-tiny", *args]) == 0
    shown = capsys.readouterr().out
    assert f"profile written to {profile}" in shown
    assert f"use it with: radixflow bench --runner sim --hardware {shlex.quote(str(profile))}\n" in shown


@pytest.mark.parametrize("device", ["cuda:7", "foo", "meta"])
def test_calibrate_on_a_device_this_machine_lacks_is_one_line(tmp_path, capsys, device):
    out = tmp_path / "p.json"
    assert main(["calibrate", "--model", "lfm2-tiny", "--device", device, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: --device: ") and repr(device) in err and "\n" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("no-such-model", "unknown torch model 'no-such-model'"),
        ("qwen3_5-2b", "unknown torch model 'qwen3_5-2b'"),
        ("", "must not be empty"),  # was the current directory: "cannot calibrate on '': ... no config.json"
        (" ", "must not be empty"),
    ],
    ids=["unknown", "sim-shape", "empty", "blank"],
)
def test_calibrate_unknown_model_is_the_one_line_every_door_gives(tmp_path, capsys, model, says):
    # calibrate said it its own way ("cannot calibrate on 'x': unknown model 'x': not a zoo name
    # and ..."), not --model's error as bench --runner torch (and every door) says it
    assert main(["bench", "--runner", "torch", "--model", model]) == 2
    expected = capsys.readouterr().err
    out = tmp_path / "p.json"
    assert main(["calibrate", "--model", "lfm2-tiny", "--model", model, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == expected and err.startswith(f"radixflow: error: --model: {says}")
    assert err.count("\n") == 1


def _break_shape(path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(path / "model.safetensors"))
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"][:, :-1].contiguous()
    save_file(state, str(path / "model.safetensors"), {"format": "pt"})


def _poison(path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(path / "model.safetensors"))
    state["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(state, str(path / "model.safetensors"), {"format": "pt"})


def _fractional_heads(path) -> None:
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "num_attention_heads": 4.5}))


@pytest.mark.parametrize(
    ("breaks", "says"),
    [
        (_break_shape, "tensor model.embed_tokens.weight has shape (512, 63), expected (512, 64)"),
        (_poison, "tensor model.layers.1.mlp.up_proj.weight holds 1 NaN value(s)"),
        (_fractional_heads, "config.json: num_attention_heads: must be an integer, got 4.5"),
    ],
    ids=["mis-shaped-tensor", "nan-weight", "fractional-heads"],
)
def test_calibrate_on_a_broken_checkpoint_is_one_line(tmp_path, capsys, zoo, breaks, says):
    pytest.importorskip("torch")
    import shutil

    from radixflow.models.zoo import ensure_model

    path = Path(shutil.copytree(ensure_model("llama-tiny"), tmp_path / "ckpt"))
    breaks(path)
    args = ["--max-tokens", "256", "--held-out", "1", "--repeats", "1", "--out", str(tmp_path / "p.json")]
    assert main(["calibrate", "--model", str(path), *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("radixflow: error: cannot calibrate") and says in err, err
    assert "\n" not in err and "Traceback" not in captured.err
    assert not (tmp_path / "p.json").exists()


def test_seeds_flag_reruns_every_cell_on_other_seeds(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text("seeds = [0, 1]\n" + CONFIG)
    out = tmp_path / "out"
    assert main(["experiment", str(config), "--out", str(out), "--seeds", "3,5-6,5"]) == 0
    assert "3 run, 0 from cache" in capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert [c["cell"]["workload"]["seed"] for c in doc["cells"]] == [3, 5, 6]
    assert doc["command"].endswith("--seeds 3,5-6,5")
    assert doc["description"].endswith("(Run on seeds 3, 5, 6 instead.)")
    assert "(Run on seeds 3, 5, 6 instead.)" in (out / "report.md").read_text()


@pytest.mark.parametrize("seeds", ["5-3", "x", "1-", "-2", "1,,2", "0-5000", "²"])
def test_bad_seeds_flag_is_one_line_and_exit_2(tmp_path, capsys, seeds):
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    assert main(["experiment", str(config), "--out", str(tmp_path / "o"), "--seeds", seeds]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: --seeds") and "\n" not in err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------- issue 28: what a careless config got through
def _run(argv: list[str], capsys) -> tuple[int, str]:
    with time_limit(120):  # a refusal is immediate; without one the grid would run for hours
        code = main(argv)
    return code, capsys.readouterr().err


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("radixflow: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _grid(line: str, *more: str) -> str:
    return "\n".join([CONFIG, "[[grid]]", line, *more, ""])


def _big_grid(n: int) -> str:
    """``n``**3 cells: three keys with ``n`` values each."""
    values = ", ".join(str(256 + i) for i in range(n))
    rates = ", ".join(f"{10.0 + i}" for i in range(n))
    return _grid(
        f"token_budget = [{values}]", f"max_requests = [{values}]", "[grid.workload]", f"rate = [{rates}]"
    )


def test_three_policies_without_a_fixed_cost_write_their_report(tmp_path, capsys):
    # the policies section labels its worst cell with the fixed cost the cell's runner used
    config = tmp_path / "c.toml"
    config.write_text('policies = ["native", "radixflow", "adaptive"]\n' + CONFIG)
    out = tmp_path / "out"
    code, err = _run(["experiment", str(config), "--out", str(out)], capsys)
    assert code == 0 and "Traceback" not in err, err
    fixed = json.loads((out / "results.json").read_text())["cells"][0]["fixed_cost_ms"]
    report = (out / "report.md").read_text()
    assert "## `adaptive` against min(native, radixflow)" in report
    assert f"(qwen3_5-2b, grouped, batch, {fixed:g} ms, 2 contexts, seed 0)" in report


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (CONFIG.replace('name = "cli"', "name = 3"), "name"),
        (CONFIG.replace('name = "cli"', 'name = ""'), "name"),
        (CONFIG.replace('name = "cli"', 'name = "../../../x"'), "name"),
        (CONFIG.replace('name = "cli"', 'name = "a/b"'), "name"),
        (CONFIG.replace('name = "cli"', 'name = ".hidden"'), "name"),
        (CONFIG.replace('name = "cli"', 'name = "two words"'), "name"),
        (CONFIG.replace('name = "cli"', 'name = "cli"\ndescription = 3'), "description"),
        ("seeds = [1, 1]\n" + CONFIG, "seeds"),
        ('policies = ["native", "native"]\n' + CONFIG, "policies"),
        ('policies = ["native", "radixflow", "native@"]\n' + CONFIG, "policies"),
        (CONFIG + "\n[[grid]]\n", "grid[0]"),
        (
            CONFIG + '[[grid]]\nname = "a"\ntoken_budget = 128\n[[grid]]\nname = "a"\ntoken_budget = 512\n',
            "grid[1].name",
        ),
        (_grid("name = 3"), "grid[0].name"),
        (_grid('name = ""'), "grid[0].name"),
        (_grid('name = "two\\nlines"'), "grid[0].name"),
        (_grid("seeds = [2, 2]"), "grid[0].seeds"),
        (_grid("seeds = []"), "grid[0].seeds"),
        (_grid("token_budget = [256, 512, 256]"), "grid[0].token_budget"),
        (_grid("token_budget = []"), "grid[0].token_budget"),
        (_grid("[grid.workload]", "rate = [10.0, 10]"), "grid[0].workload.rate"),
        (_big_grid(100), "grid"),
    ],
    ids=lambda x: x if isinstance(x, str) and len(x) < 20 else None,
)
def test_a_careless_config_is_refused_in_one_line_before_any_cell_runs(
    tmp_path, capsys, monkeypatch, text, where
):
    monkeypatch.chdir(tmp_path)  # results/<name> would be written here without --out
    config = tmp_path / "c.toml"
    config.write_text(text)
    code, err = _run(["experiment", str(config)], capsys)
    line = _one_error_line(err)
    assert code == 2 and f"c.toml: {where}: " in line, line
    assert sorted(p.name for p in tmp_path.parent.iterdir() if p.name in ("x", "results")) == []
    assert [p.name for p in tmp_path.iterdir()] == ["c.toml"]


def test_a_grid_too_large_says_its_size_and_how_to_run_it_anyway(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(_big_grid(100))
    line = _one_error_line(_run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)[1])
    assert "1,000,000 cells" in line and "--max-cells 1000000" in line, line
    config.write_text(_grid("token_budget = [256, 512, 1024]"))
    argv = ["experiment", str(config), "--out", str(tmp_path / "o")]
    code, err = _run([*argv, "--max-cells", "2"], capsys)
    assert code == 2 and "3 cells" in _one_error_line(err) and "--max-cells 3" in err
    code, err = _run([*argv, "--max-cells", "3", "--seeds", "0-1"], capsys)
    assert code == 2 and _one_error_line(err).startswith("radixflow: error: --seeds: 6 cells"), err
    assert not (tmp_path / "o").exists()
    assert _run([*argv, "--max-cells", "3"], capsys)[0] == 0
    code, err = _run([*argv, "--max-cells", "0"], capsys)
    assert code == 2 and "--max-cells" in _one_error_line(err)


def test_device_is_checked_as_the_torch_runner_checks_it_and_unused_is_a_warning(tmp_path, capsys):
    pytest.importorskip("torch")
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)  # sim cells only
    out = tmp_path / "o"
    code, err = _run(["experiment", str(config), "--out", str(out), "--device", "quantum"], capsys)
    line = _one_error_line(err)
    assert code == 2 and "--device" in line and "'quantum'" in line, line
    assert not out.exists()
    code, err = _run(["experiment", str(config), "--out", str(out), "--device", "cpu"], capsys)
    said = [line for line in err.splitlines() if line.startswith("radixflow:")]
    assert code == 0 and said == [
        "radixflow: warning: --device has no effect: no cell of this experiment runs on the torch runner"
    ], err


def test_a_large_grid_shows_progress_while_its_cells_are_checked(tmp_path, capsys, monkeypatch):
    # a log (not a terminal) gets a line per step from the first second on; the last grid is bad,
    # so nothing runs after the 300 cells of the first are checked
    monkeypatch.setattr("radixflow.progress.QUIET_S", 0.0)
    config = tmp_path / "c.toml"
    values = ", ".join(str(256 + i) for i in range(300))
    config.write_text(_grid(f"token_budget = [{values}]") + "[[grid]]\ntoken_budget = 0\n")
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("radixflow: error: ") and "grid[1].token_budget" in lines[-1]
    assert [line.split(" (")[0] for line in lines[:-1]] == [
        f"c.toml: checking cells: {n}/301" for n in (100, 200, 300)
    ], err
    assert not (tmp_path / "o").exists()


def test_a_torch_cells_device_is_checked_where_the_config_sets_it(tmp_path, capsys):
    pytest.importorskip("torch")
    config = tmp_path / "c.toml"
    torch_cell = CONFIG.replace(
        'model = "qwen3_5-2b"', 'runner = "torch"\nmodel = "lfm2-tiny"\ndevice = "quantum"'
    )
    config.write_text(torch_cell)
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    assert code == 2 and "c.toml: defaults.device: unknown device 'quantum'" in line, line
    assert not (tmp_path / "o").exists()


def _below_a_file(tmp_path):
    return tmp_path / "c.toml" / "sub"


def _occupied(name: str, directory: bool):
    def make(tmp_path):
        out = tmp_path / "o"
        out.mkdir()
        (out / name).mkdir() if directory else (out / name).write_text("")
        return out

    return make


@pytest.mark.parametrize(
    "make",
    [_below_a_file, _occupied("cells", False), _occupied("results.json", True), _occupied("report.md", True)],
    ids=["below-a-file", "cells-is-a-file", "results-is-a-dir", "report-is-a-dir"],
)
def test_an_output_directory_that_cannot_be_written_is_one_line_before_any_cell_runs(tmp_path, capsys, make):
    # each reached os calls as a traceback: mkdir, or writing results.json after every cell ran;
    # then the line named the directory but not the flag, where every other output's names both
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    out = make(tmp_path)
    code, err = _run(["experiment", str(config), "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert code == 2 and line.startswith(f"radixflow: error: cannot write --out {out}: "), line
    assert not (out / "cells").is_dir()  # refused before any cell ran


def test_a_ray_address_ray_refuses_is_one_line(tmp_path, capsys):
    # ray.init's "Invalid address format" reached the user as a traceback after the config was checked
    pytest.importorskip("ray")
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o"), "--ray-address", "x"], capsys)
    line = _one_error_line(err)
    assert code == 2 and line.startswith("radixflow: error: --ray-address x: ") and "Invalid address" in line


def test_a_config_key_that_changes_none_of_its_cells_is_one_warning_line(tmp_path, capsys):
    # bench warns of --device on the sim runner; the same key in a config was taken without a word
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.replace("token_budget = 256", 'token_budget = 256\ndevice = "cuda"'))
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    said = [line for line in err.splitlines() if line.startswith("radixflow:")]
    assert code == 0 and said == [
        f"radixflow: warning: {config}: defaults.device has no effect with the sim runner"
    ], err


def test_device_flag_replaces_a_device_this_machine_lacks_before_the_cells_are_checked(tmp_path, capsys):
    # the config's device was refused before --device replaced it: a GPU config could not be tried here
    pytest.importorskip("torch")
    config = tmp_path / "c.toml"
    torch_cell = CONFIG.replace(
        'model = "qwen3_5-2b"', 'runner = "torch"\nmodel = "lfm2-tiny"\ndevice = "cuda:99"'
    )
    config.write_text(torch_cell)
    out = tmp_path / "o"
    code, err = _run(["experiment", str(config), "--out", str(out), "--device", "cpu"], capsys)
    assert code == 0 and "error" not in err, err
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    assert cell["cell"]["device"] == "cpu" and cell["runner_settings"]["device"] == "cpu"


def test_a_cell_that_fails_as_it_runs_is_one_line_naming_the_cell_and_its_key(tmp_path, capsys, monkeypatch):
    # it said "--trace-out: ...", a flag `experiment` does not have, and not which cell failed
    from radixflow.problems import Problem, ProblemError

    def refuse(self, prompt_lengths=None):
        raise ProblemError(Problem("trace_out", "cannot write t.json: No space left on device"))

    monkeypatch.setattr("radixflow.options.build.EnginePlan.build", refuse)
    config = tmp_path / "c.toml"
    config.write_text(_grid('name = "traced"'))
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    assert code == 2 and "cell 'traced'" in line and "trace_out: cannot write t.json" in line, line
    assert "--trace-out" not in line


def test_a_failed_run_removes_the_earlier_runs_results_and_says_so(tmp_path, capsys, monkeypatch):
    # an earlier run's results.json and report.md (perhaps of another config) stayed, looking current
    from radixflow.problems import Problem, ProblemError

    config, out = tmp_path / "c.toml", tmp_path / "o"
    config.write_text(CONFIG)
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert (out / "results.json").is_file() and (out / "latency_cdf.png").is_file()

    def refuse(self, prompt_lengths=None):
        raise ProblemError(Problem("trace_out", "cannot write t.json: No space left on device"))

    monkeypatch.setattr("radixflow.options.build.EnginePlan.build", refuse)
    config.write_text(CONFIG.replace("token_budget = 256", "token_budget = 128"))  # another cell
    capsys.readouterr()
    code, err = _run(["experiment", str(config), "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert code == 2 and "trace_out: cannot write t.json" in line, line
    assert "removed the earlier run's results.json, report.md, latency_cdf.png" in line, line
    assert not (out / "results.json").exists() and not (out / "report.md").exists()
    assert not list(out.glob("*.png")) and list((out / "cells").iterdir())  # the cached cell stays


def _trace_writes_fail(monkeypatch) -> None:
    """The trace file opens, and every write to it fails as a full disk does (the first, written
    whole, and those after it, in place)."""
    import builtins
    import errno

    def full_disk(path, mode="r", *args, **kwargs):
        if mode == "r+b":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return builtins.open(path, mode, *args, **kwargs)

    def no_room(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr("radixflow.engine.trace_file.open", full_disk, raising=False)
    monkeypatch.setattr("radixflow.engine.trace_file.write_whole", no_room)


def test_a_cells_trace_the_disk_refuses_is_one_line_naming_the_cell(tmp_path, capsys, monkeypatch):
    # the trace opened, then its write at the cell's end failed: an OSError traceback
    _trace_writes_fail(monkeypatch)
    config = tmp_path / "c.toml"
    config.write_text(_grid('name = "traced"', f'trace_out = "{tmp_path / "t.json"}"'))
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    assert code == 2 and "cell 'traced'" in line and "No space left on device" in line, line
    assert "trace_out: cannot write" in line


@pytest.mark.parametrize("where", ["defaults", "grid"])
def test_a_runner_build_refusal_names_the_config_key_it_came_from(tmp_path, capsys, where):
    # it said "kernels: ... not cpu in torch.bfloat16": no key path, and a torch repr for the dtype
    pytest.importorskip("torch")
    torch_cell = CONFIG.replace(
        'model = "qwen3_5-2b"', 'runner = "torch"\nmodel = "lfm2-tiny"\ndtype = "bfloat16"'
    )
    text = torch_cell.replace("token_budget = 256", 'token_budget = 256\nkernels = "native"')
    if where == "grid":
        text = torch_cell + '[[grid]]\nname = "a"\nkernels = "native"\n[[grid]]\nname = "b"\n'
    config = tmp_path / "c.toml"
    config.write_text(text)
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    key = "defaults.kernels" if where == "defaults" else "grid[0].kernels"
    assert code == 2 and f"{key}: native kernels run on a CPU in float32, not cpu in bfloat16" in line, line
    assert "--kernels" not in line and "torch." not in line


def test_a_configs_device_that_device_flag_replaces_is_a_warning(tmp_path, capsys):
    pytest.importorskip("torch")
    config = tmp_path / "c.toml"
    config.write_text(
        CONFIG.replace('model = "qwen3_5-2b"', 'runner = "torch"\nmodel = "lfm2-tiny"\ndevice = "cpu"')
    )
    code, err = _run(["experiment", str(config), "--out", str(tmp_path / "o"), "--device", "cpu"], capsys)
    said = [line for line in err.splitlines() if line.startswith("radixflow:")]
    why = "has no effect with --device (it replaces every torch cell's)"
    assert code == 0 and said == [f"radixflow: warning: {config}: defaults.device {why}"], err


@pytest.mark.parametrize("limit", [3000, 8000])  # a cell's file (5 kB) fails, or a plot (15 kB)
def test_an_output_the_disk_refuses_part_way_is_one_line_and_leaves_no_half_file(tmp_path, limit):
    """A full disk at a cell's file or a plot was a traceback, and left the cell's .tmp file."""
    config, out = tmp_path / "c.toml", tmp_path / "out"
    config.write_text(CONFIG)
    env = checkout_env()

    def small_files() -> None:  # files past ``limit`` bytes fail (EFBIG), as a full disk's do (ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    proc = subprocess.run(
        [sys.executable, "-m", "radixflow.cli", "experiment", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        preexec_fn=small_files,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"radixflow: error: cannot write {out}/"), proc.stderr
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*"))


def test_max_cells_bounds_the_cells_the_seeds_given_run_not_the_configs_own(tmp_path, capsys):
    # `--seeds 0` on a config of three seeds runs a third of its cells; --max-cells of that third
    # was refused, the config's own seeds counted before --seeds replaced them
    config = tmp_path / "c.toml"
    config.write_text("seeds = [0, 1, 2]\n" + _grid("token_budget = [256, 512, 1024]"))
    argv = ["experiment", str(config), "--out", str(tmp_path / "o"), "--max-cells", "3"]
    code, err = _run([*argv, "--seeds", "0"], capsys)
    assert code == 0, err
    code, err = _run([*argv, "--seeds", "0-1"], capsys)
    assert code == 2 and "6 cells" in _one_error_line(err) and "--max-cells 6" in err, err


@pytest.mark.parametrize("name", ["results.json", "report.md", "rounds.png", "cells/x.json"])
def test_a_trace_out_among_the_files_out_holds_is_refused_before_any_cell_runs(tmp_path, capsys, name):
    # trace_out = "out/results.json" with --out out: the cell wrote its trace, then results.json
    # replaced it once every cell had run (or the earlier run's removal took it), without a word
    out = tmp_path / "o"
    (out / "cells").mkdir(parents=True)  # an earlier run's
    config = tmp_path / "c.toml"
    config.write_text(_grid('name = "traced"', f'trace_out = "{out / name}"'))
    code, err = _run(["experiment", str(config), "--out", str(out)], capsys)
    line = _one_error_line(err)
    assert code == 2 and "trace_out" in line and "--out" in line and name.split("/")[0] in line, line
    assert not (out / name).exists() and not (out / "results.json").exists()


def test_experiment_help_says_a_device_not_given_is_each_cells_own(capsys):
    # it said "(default: cpu)": left out, --device replaces nothing (a config's `device = "cuda"`
    # cells run on CUDA), as the command's own description says
    with pytest.raises(SystemExit):
        main(["experiment", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    device = shown[shown.index("--device DEVICE ") :]
    assert "(default: cpu)" not in device and "each cell's own" in device


def test_a_config_of_dash_is_refused_naming_the_config_argument(tmp_path, capsys):
    # it said "cannot read -: No such file or directory": neither which argument nor that - is not
    # standard input here
    code, err = _run(["experiment", "-", "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    assert code == 2 and line.startswith("radixflow: error: config: - (standard input) is not read"), line
    assert "./-" in line


def test_a_config_that_cannot_be_read_is_named_as_the_config(tmp_path, capsys):
    missing = tmp_path / "missing.toml"
    code, err = _run(["experiment", str(missing), "--out", str(tmp_path / "o")], capsys)
    line = _one_error_line(err)
    assert code == 2 and line == f"radixflow: error: cannot read config {missing}: No such file or directory"


@pytest.mark.parametrize(
    "seeds, flag, key",
    [
        ([2**64], None, "seeds"),
        ([0], str(2**64), "--seeds"),
        ([0], f"{2**64 - 2}-{2**64}", "--seeds"),
        ([0], None, "grid[0].seeds"),
    ],
)
def test_a_seed_past_64_bits_is_refused_at_every_door_as_bench_refuses_it(tmp_path, capsys, seeds, flag, key):
    # the engine's seeds are bounded (bench: "--seed: must fit in 64 bits ..."); an experiment took
    # 2**64 and more, from its config or --seeds, and ran
    config = tmp_path / "c.toml"
    grid = f"\n[[grid]]\nseeds = [{2**64}]\n" if key.startswith("grid") else ""
    config.write_text(f"seeds = {seeds}\n{CONFIG}{grid}")
    argv = ["experiment", str(config), "--out", str(tmp_path / "o"), *(["--seeds", flag] if flag else [])]
    code, err = _run(argv, capsys)
    line = _one_error_line(err)
    bench = f"must fit in 64 bits (-9223372036854775808 to 18446744073709551615), got {2**64}"
    assert code == 2 and line.endswith(f"{key}: {bench}"), line
    assert not (tmp_path / "o").exists()
