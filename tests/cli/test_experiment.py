"""`radixflow experiment`, `radixflow calibrate` and `bench --hardware FILE` through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from radixflow.cli import main
from radixflow.costmodel.hardware.profiles import HARDWARE, save_profile

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
    assert main(["experiment", str(config), "--out", str(out)]) == 0
    assert "0 run, 1 from cache" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (CONFIG.replace("groups = 2", "groups = -2"), "defaults.workload.groups"),
        (CONFIG + "\n[[grid]]\nrunner = 'gpu'\n", "grid[0].runner"),
        ("name = 'x'\nseeds = 3\n", "seeds"),
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
    from radixflow.runners.profile_store import load_stored, store_key

    stored = load_stored(store_key(ensure_model("lfm2-tiny"), "float32", "cpu", 1))
    assert stored is not None and stored.round_overhead_s == pytest.approx(data["round_overhead_s"])


def test_calibrate_unknown_model_is_one_line(tmp_path, capsys):
    assert main(["calibrate", "--model", "no-such-model", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("radixflow: error: cannot calibrate on 'no-such-model'") and "\n" not in err


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
