"""`radixflow bench --runner torch` and `radixflow models` on tiny zoo models."""

from __future__ import annotations

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
    native, flow = json.loads(out.read_text())["results"]
    assert native["agreement"] == flow["agreement"] == 1.0
    assert native["outputs_sha256"] == flow["outputs_sha256"]
    assert flow["rounds"] < native["rounds"]
    assert native["worker_call_s"] > 0 and "median_top1_margin" in native


def test_models_lists_the_zoo(capsys):
    assert main(["models", "--json"]) == 0
    names = {m["name"] for m in json.loads(capsys.readouterr().out)}
    assert {"qwen3_5-small", "lfm2-small", "nemotron_h-small", "falcon_h1-small", "llama-tiny"} <= names


def test_unknown_model_is_a_one_line_error(capsys):
    assert main(["bench", "--runner", "torch", "--model", "gpt-17"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown model 'gpt-17'" in err and len(err.splitlines()) == 1


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
