"""Configs transformers 5.24 loads and runs are loaded (checked as on load) and give its logits:
each case is a tiny preset with a change, built by us, saved, then read back by both."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from model_utils import Pools, check, prompt  # noqa: E402

from radixflow.models.io.loader import load_model, save_model  # noqa: E402
from radixflow.models.layers import Config  # noqa: E402
from radixflow.models.registry import model_class  # noqa: E402
from radixflow.models.seq_spec import SeqSpec  # noqa: E402
from radixflow.models.zoo_catalogue import family_module, preset_config, zoo_entry  # noqa: E402

LLAMA3 = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
}


def matches_transformers(preset: str, change: dict[str, Any], path: Path) -> None:
    """``preset`` with ``change`` (None removes a key) loads as ours and as transformers' model,
    and both give the same float32 logits on a 40-token prompt (transformers without its cache:
    a model with no attention layer has no cache length to read)."""
    config = {k: v for k, v in {**preset_config(preset), **change}.items() if v is not None}
    model = model_class(config["model_type"])(Config(config))
    family_module(zoo_entry(preset).family).init_weights(model, torch.Generator().manual_seed(0))
    save_model(model, path)
    ours = load_model(path, "cpu", torch.float32)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    ids = prompt(1, 40)
    pools = Pools(ours)
    (out,) = pools.run(ours, [(ids, SeqSpec(0, len(ids), pools.blocks(len(ids))))])
    with torch.no_grad():
        want = ref(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    check(out, want)


# llama3 rope without any context: transformers takes its config class's max_position_embeddings
# (LlamaConfig 2048, Qwen3Config 32768, FalconH1Config 8192) as the original context
@pytest.mark.parametrize("preset", ["llama-tiny", "qwen3-tiny", "falcon_h1-tiny"])
@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_scaling"])
def test_llama3_rope_without_a_context_reads_the_config_class_default(tmp_path, preset, spelling) -> None:
    change = {"max_position_embeddings": None, "rope_parameters": None, spelling: LLAMA3}
    matches_transformers(preset, change, tmp_path)
