"""Bad model-side input to `radixflow bench --runner torch`: one line, exit 2, no traceback.

Broken checkpoint directories (config.json, safetensors) and devices this machine does not have.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from radixflow.cli import main
from radixflow.models.families import lfm2
from radixflow.models.io.loader import save_model
from radixflow.models.layers import Config

WORKLOAD = ["--groups", "1", "--candidates", "2", "--context-len", "16", "--candidate-len", "4"]


@pytest.fixture(autouse=True)
def zoo_cache(tmp_path_factory, monkeypatch) -> Path:
    cache = tmp_path_factory.mktemp("zoo")
    monkeypatch.setenv("RADIXFLOW_CACHE", str(cache))
    return cache


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    model = lfm2.Lfm2ForCausalLM(Config(lfm2.PRESETS["tiny"]))
    lfm2.init_weights(model, torch.Generator().manual_seed(0))
    path = tmp_path_factory.mktemp("good")
    save_model(model, path)
    return path


@pytest.fixture
def checkpoint(good: Path, tmp_path: Path) -> Path:
    """A fresh copy of a loadable checkpoint, for a test to break."""
    return Path(shutil.copytree(good, tmp_path / "ckpt"))


def bench_error(capsys, *argv: str) -> str:
    """Run `radixflow bench --runner torch ARGV`; assert a one-line usage error and return it."""
    code = main(["bench", "--runner", "torch", *WORKLOAD, *argv])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, err
    assert "Traceback" not in captured.err and len(err.splitlines()) == 1, err
    assert err.startswith("radixflow: error: ")
    return err


def test_the_intact_checkpoint_runs(checkpoint: Path) -> None:
    assert main(["bench", "--runner", "torch", *WORKLOAD, "--model", str(checkpoint)]) == 0


@pytest.mark.parametrize(
    "text, says",
    [
        ("{ not json", "not valid JSON"),
        ('[{"model_type": "lfm2"}]', "expected a JSON object, got list"),
        ('{"model_type": "lfm2"}', "vocab_size: missing (must be a positive integer)"),
    ],
    ids=["not-json", "not-an-object", "no-vocab-size"],
)
def test_broken_config_json_is_a_one_line_error(checkpoint: Path, capsys, text: str, says: str) -> None:
    (checkpoint / "config.json").write_text(text)
    err = bench_error(capsys, "--model", str(checkpoint))
    assert says in err and "config.json" in err


def test_config_json_that_is_not_text_is_a_one_line_error(checkpoint: Path, capsys) -> None:
    (checkpoint / "config.json").write_bytes(b"\xff\xfe{\x00\x80")
    assert "not valid JSON" in bench_error(capsys, "--model", str(checkpoint))


@pytest.mark.parametrize(
    "change, says",
    [
        ({"hidden_size": None}, "hidden_size: missing"),
        ({"num_attention_heads": "four"}, 'num_attention_heads: must be an integer, got "four"'),
        ({"layer_types": ["conv"]}, "layer_types: has 1 entries, but num_hidden_layers is 5"),
        ({"max_position_embeddings": -1}, "max_position_embeddings: must be a positive integer, got -1"),
        ({"eos_token_id": 1_000_000}, "eos_token_id: must be below vocab_size"),
    ],
    ids=["missing-field", "wrong-type", "inconsistent", "negative-context", "eos-past-vocab"],
)
def test_config_the_family_cannot_build_is_a_one_line_error(checkpoint: Path, capsys, change, says) -> None:
    path = checkpoint / "config.json"
    config = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    err = bench_error(capsys, "--model", str(checkpoint))
    assert says in err and "config.json" in err


def test_truncated_safetensors_is_a_one_line_error_naming_the_file(checkpoint: Path, capsys) -> None:
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    err = bench_error(capsys, "--model", str(checkpoint))
    assert "model.safetensors: not a readable safetensors file" in err


@pytest.mark.parametrize("garbage", [b"", b"not a safetensors file at all", bytes(range(256)) * 40])
def test_garbage_safetensors_is_a_one_line_error_naming_the_file(checkpoint: Path, capsys, garbage) -> None:
    (checkpoint / "model.safetensors").write_bytes(garbage)
    err = bench_error(capsys, "--model", str(checkpoint))
    assert "model.safetensors: not a readable safetensors file" in err


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_an_integer_weight_is_a_one_line_error_naming_the_tensor(checkpoint: Path, capsys, dtype) -> None:
    """An integer norm weight was once cast into the float parameter without a word."""
    weights = checkpoint / "model.safetensors"
    state = load_file(weights)
    name = next(k for k in sorted(state) if k.endswith("norm.weight"))
    state[name] = state[name].to(dtype)
    save_file(state, weights)
    err = bench_error(capsys, "--model", str(checkpoint))
    assert f"model.safetensors: tensor {name} has dtype" in err and "expected a floating-point dtype" in err


def test_broken_shard_index_is_a_one_line_error(checkpoint: Path, capsys) -> None:
    # a sharded checkpoint: beside model.safetensors the index is not read (as in transformers)
    (checkpoint / "model.safetensors").rename(checkpoint / "model-00001-of-00001.safetensors")
    (checkpoint / "model.safetensors.index.json").write_text('{"weight_map": 3}')
    assert "no weight_map" in bench_error(capsys, "--model", str(checkpoint))


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch build has CUDA")
def test_cuda_on_a_cpu_build_is_a_one_line_error(capsys) -> None:
    err = bench_error(capsys, "--model", "lfm2-tiny", "--device", "cuda")
    assert "device 'cuda' is not available: this torch build has no CUDA support" in err
    assert "available here: cpu" in err


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:x"])
def test_unknown_device_is_a_one_line_error_naming_the_available_ones(capsys, device: str) -> None:
    err = bench_error(capsys, "--model", "lfm2-tiny", "--device", device)
    assert f"unknown device {device!r}" in err and "available here: cpu" in err


def test_device_is_checked_before_any_model_is_built(capsys, zoo_cache: Path) -> None:
    bench_error(capsys, "--model", "lfm2-tiny", "--device", "tpu")
    assert not any(zoo_cache.iterdir())  # the zoo model was never built
