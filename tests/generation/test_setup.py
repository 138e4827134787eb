"""generation.setup: a model directory's weights and tokenizer read together, and refused together."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from radixflow.generation import LLM
from radixflow.models.zoo import ensure_model
from radixflow.problems import ProblemError


def _shrink_vocab(src: Path, dst: Path, vocab: int) -> None:
    """A copy of ``src`` whose model has only the first ``vocab`` tokens (its tokenizer unchanged)."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    config["vocab_size"] = vocab
    (dst / "config.json").write_text(json.dumps(config))
    state = load_file(str(dst / "model.safetensors"))
    big = {"model.embed_tokens.weight", "lm_head.weight"}
    small = {k: (v[:vocab] if k in big else v).contiguous() for k, v in state.items()}
    save_file(small, str(dst / "model.safetensors"), {"format": "pt"})


def test_a_tokenizer_with_ids_past_the_models_vocabulary_is_refused_at_load(
    zoo, tmp_path: Path, monkeypatch
) -> None:
    """Its tokens past vocab_size have no embedding: text that encodes to one failed as
    'prompt: token id 334 is outside the vocabulary', blaming a text prompt for the checkpoint's
    mismatch. Refused when the model is loaded, in one line naming both files and the field,
    before the weights are read and the pools allocated (minutes and gigabytes for a large model)."""
    from radixflow.options.build import EnginePlan

    _shrink_vocab(ensure_model("llama-tiny"), tmp_path / "ckpt", 300)
    monkeypatch.setattr(EnginePlan, "build", lambda *a, **k: pytest.fail("the runner was built first"))
    with pytest.raises(ProblemError) as info:
        LLM(str(tmp_path / "ckpt"), torch_threads=1)
    text = str(info.value)
    assert "\n" not in text and text.startswith("model: "), text
    assert "tokenizer.json" in text and "vocab_size" in text and "300" in text, text


def test_a_model_vocabulary_wider_than_its_tokenizer_loads(zoo, tmp_path: Path) -> None:
    """The usual padding of the embedding past the tokenizer's last id (as Qwen's) is no mismatch."""
    src = ensure_model("llama-tiny")
    shutil.copytree(src, tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["vocab_size"] += 64
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    state = load_file(str(src / "model.safetensors"))
    for k in ("model.embed_tokens.weight", "lm_head.weight"):
        state[k] = torch.cat([state[k], torch.zeros(64, state[k].shape[1])])
    save_file(state, str(tmp_path / "ckpt" / "model.safetensors"), {"format": "pt"})
    (out,) = LLM(str(tmp_path / "ckpt"), torch_threads=1).generate(["hello world"])
    assert out.token_ids


def test_an_unknown_model_at_a_door_that_needs_weights_lists_only_models_with_weights() -> None:
    """`radixflow serve gpt-17` (generate, score, run-batch, `LLM`) answered "unknown torch model
    'gpt-17' (zoo names: ...; sim shapes: qwen3_5-2b, ...)": the sim shapes it offered are refused
    there in turn ("has no weights"). Such a door lists the zoo names alone; `bench`, where a sim
    shape runs, still offers both."""
    from radixflow.generation.setup import weights_problem
    from radixflow.options import EngineOptions

    with pytest.raises(ProblemError) as info:
        LLM("gpt-17", torch_threads=1)
    problem = weights_problem(EngineOptions(model="gpt-17"))
    assert problem is not None
    for said in (str(info.value), f"{problem.param}: {problem.message}"):
        assert said.startswith("model: unknown torch model 'gpt-17' (zoo names: llama-tiny"), said
        assert "sim shapes" not in said and "qwen3_5-2b" not in said, said
