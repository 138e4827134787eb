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


CONV_ONLY = {"layer_types": ["conv"] * 5, "full_attn_idxs": []}
LINEAR_ONLY = {"layer_types": ["linear_attention"] * 4}
FULL_ONLY = {"layer_types": ["full_attention"] * 4}
NEMOTRON_NO_ATTENTION = {"layers_block_type": ["linear_attention", "mlp", "moe"], "num_hidden_layers": 3}
NEMOTRON_NO_MAMBA = {"layers_block_type": ["full_attention", "mlp", "moe"], "num_hidden_layers": 3}
NEMOTRON_NO_MOE = {"layers_block_type": ["full_attention", "mlp", "linear_attention"], "num_hidden_layers": 3}

# A relation between keys of a layer kind the pattern does not have: transformers never reads
# those keys, so it runs the model; each was refused here
ABSENT_KIND = {
    # attention's heads, on a model with no attention layer
    "lfm2-conv-only-kv-heads": ("lfm2-tiny", {**CONV_ONLY, "num_key_value_heads": 3}),
    "lfm2-conv-only-heads-vs-hidden": (
        "lfm2-tiny",
        {**CONV_ONLY, "num_attention_heads": 5, "num_key_value_heads": 5},
    ),
    "lfm2-conv-only-odd-heads": ("lfm2-tiny", {**CONV_ONLY, "hidden_size": 66, "num_attention_heads": 6}),
    "qwen3_5-linear-only-kv-heads": ("qwen3_5-tiny", {**LINEAR_ONLY, "num_key_value_heads": 3}),
    "qwen3_next-linear-only-kv-heads": ("qwen3_next-tiny", {**LINEAR_ONLY, "num_key_value_heads": 3}),
    "nemotron_h-no-attention-kv-heads": (
        "nemotron_h-tiny",
        {**NEMOTRON_NO_ATTENTION, "num_key_value_heads": 3},
    ),
    # the Gated DeltaNet's heads, on a model with no DeltaNet layer
    "qwen3_5-full-only-deltanet-heads": ("qwen3_5-tiny", {**FULL_ONLY, "linear_num_key_heads": 3}),
    "qwen3_next-full-only-deltanet-heads": ("qwen3_next-tiny", {**FULL_ONLY, "linear_num_key_heads": 3}),
    # the SSM's groups, on a model with no Mamba layer (given, and NemotronHConfig's 8)
    "nemotron_h-no-mamba-groups": ("nemotron_h-tiny", {**NEMOTRON_NO_MAMBA, "n_groups": 3}),
    "nemotron_h-no-mamba-default-groups": (
        "nemotron_h-tiny",
        {**NEMOTRON_NO_MAMBA, "n_groups": None, "mamba_num_heads": 12},
    ),
    # the router's sizes, on a model with no MoE layer
    "nemotron_h-no-moe-router-groups": ("nemotron_h-tiny", {**NEMOTRON_NO_MOE, "n_group": 3}),
    "nemotron_h-no-moe-chosen-groups": ("nemotron_h-tiny", {**NEMOTRON_NO_MOE, "topk_group": 3}),
    "nemotron_h-no-moe-experts-per-token": ("nemotron_h-tiny", {**NEMOTRON_NO_MOE, "num_experts_per_tok": 9}),
    "qwen3_next-every-layer-dense": (
        "qwen3_next-tiny",
        {"mlp_only_layers": [0, 1, 2, 3], "num_experts_per_tok": 6},
    ),
    "qwen3_next-sparse-step-past-the-layers": (
        "qwen3_next-tiny",
        {"decoder_sparse_step": 5, "num_experts_per_tok": 6},
    ),
}


@pytest.mark.parametrize("case", sorted(ABSENT_KIND))
def test_a_relation_applies_only_where_its_layer_kind_is(tmp_path, case) -> None:
    preset, change = ABSENT_KIND[case]
    matches_transformers(preset, change, tmp_path)


# A model with no attention layer reads no attention heads: transformers takes its config class's
# num_attention_heads (32, or 16) and never uses it; each was refused as missing
NO_HEADS = {
    "lfm2": ("lfm2-tiny", CONV_ONLY),
    "qwen3_5": ("qwen3_5-tiny", LINEAR_ONLY),
    "qwen3_next": ("qwen3_next-tiny", LINEAR_ONLY),
    "nemotron_h": ("nemotron_h-tiny", NEMOTRON_NO_ATTENTION),
}


@pytest.mark.parametrize("case", sorted(NO_HEADS))
def test_a_model_without_attention_layers_needs_no_attention_heads(tmp_path, case) -> None:
    preset, change = NO_HEADS[case]
    no_heads = {"num_attention_heads": None, "num_key_value_heads": None}
    matches_transformers(preset, {**change, **no_heads}, tmp_path)


def test_the_defaults_named_here_are_transformers_config_defaults() -> None:
    """What each constant stands for where config.json leaves a key out: the config class's value."""
    from radixflow.models.families import layer_patterns as lp
    from radixflow.models.families import llama

    nemotron = transformers.NemotronHConfig()
    assert (nemotron.n_groups, nemotron.n_group, nemotron.topk_group) == (
        lp.NEMOTRON_GROUPS,
        lp.NEMOTRON_ROUTER_GROUPS,
        lp.NEMOTRON_TOPK_GROUPS,
    )
    contexts = (llama.LLAMA_CONTEXT, llama.QWEN3_CONTEXT, llama.FALCON_H1_CONTEXT)
    classes = (transformers.LlamaConfig, transformers.Qwen3Config, transformers.FalconH1Config)
    assert contexts == tuple(c().max_position_embeddings for c in classes)
