"""GPU-scale model shapes for the simulated runner, written as the public config fields they use.

Each entry names where its figures come from. Where a figure could not be checked against the
released ``config.json`` from this machine (no model hub here), its source says so.
"""

from __future__ import annotations

from typing import Any

from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.costmodel.shape.model_shape import ModelShape

_QWEN35_GDN = {
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
}

PUBLIC_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "qwen3_5-2b": (
        {
            "model_type": "qwen3_5_text",
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "full_attention_interval": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "intermediate_size": 6144,
            **_QWEN35_GDN,
            "linear_num_value_heads": 16,
            # Qwen3.5 checkpoints have 248,320 tokens; the sim keeps its earlier 151,936 so the
            # default benchmark's workload (token ids drawn below the vocabulary) is unchanged.
            "vocab_size": 151_936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 262_144,
        },
        "Qwen/Qwen3.5-2B-like: 24 layers of width 2048, 6 of them attention with 8 query / 2 KV "
        "heads (as published for Qwen3.5-2B), the 3:1 DeltaNet:attention pattern; the DeltaNet's "
        "key heads and head widths as transformers 5.24 Qwen3_5TextConfig; 16 value heads and a "
        "6144-wide MLP assumed (that config, at width 4096, has 32 value heads and a 12288-wide "
        "MLP); none checked against the released config.json",
    ),
    "qwen3_5-35b-a3b": (
        {
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 2048,
            "num_hidden_layers": 40,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            **_QWEN35_GDN,
            "linear_num_value_heads": 32,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "vocab_size": 248_320,
            "max_position_embeddings": 262_144,
        },
        "Qwen/Qwen3.5-35B-A3B (transformers 5.24 Qwen3_5MoeTextConfig defaults, documented for that "
        "checkpoint, but max_position_embeddings 262144, the native context published for the model "
        "and not checked against its config.json, not the default's 32768)",
    ),
    "qwen3_next-80b-a3b": (
        {
            "model_type": "qwen3_next",
            "hidden_size": 2048,
            "num_hidden_layers": 48,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "intermediate_size": 5120,  # unread: every layer is MoE
            **_QWEN35_GDN,
            "linear_num_value_heads": 32,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "vocab_size": 151_936,
            "max_position_embeddings": 262_144,
        },
        "Qwen/Qwen3-Next-80B-A3B-Instruct (transformers 5.24 Qwen3NextConfig defaults, documented for "
        "that checkpoint, but intermediate_size 5120 as its config.json, not the default's 5632, and "
        "max_position_embeddings 262144, the native context published for the model and not checked "
        "against its config.json, not the default's 32768)",
    ),
    "lfm2-1.2b": (
        {
            "model_type": "lfm2",
            "hidden_size": 2048,
            "num_hidden_layers": 16,
            "full_attn_idxs": [2, 5, 8, 10, 12, 14],
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 12_288,
            "block_auto_adjust_ff_dim": True,
            "block_ffn_dim_multiplier": 1.0,
            "block_multiple_of": 256,
            "conv_L_cache": 3,
            "vocab_size": 65_536,
            "tie_word_embeddings": True,
            "max_position_embeddings": 128_000,
        },
        "LiquidAI/LFM2-1.2B (16 blocks: 10 short-conv + 6 GQA at full_attn_idxs 2, 5, 8, 10, 12, 14; "
        "widths as its config.json: block_ff_dim 12288 auto-adjusted to an 8192-wide MLP; rechecked "
        "against copies of that config.json and its 1.17B parameters)",
    ),
    "nemotron_h-8b": (
        {
            "model_type": "nemotron_h",
            "hidden_size": 4096,
            "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 21_504,
            "mamba_num_heads": 128,
            "mamba_head_dim": 64,
            "ssm_state_size": 128,
            "n_groups": 8,
            "conv_kernel": 4,
            "vocab_size": 131_072,
            "max_position_embeddings": 8192,
        },
        "nvidia/Nemotron-H-8B-Base-8K (52 layers: 24 Mamba2, 4 attention, 24 FFN; widths as in "
        "transformers 5.24 NemotronHConfig defaults, in_proj 18560 x 4096)",
    ),
    "falcon_h1-1.5b": (
        {
            "model_type": "falcon_h1",
            "hidden_size": 2048,
            "num_hidden_layers": 24,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 128,
            "intermediate_size": 4608,
            "mamba_d_ssm": 3072,
            "mamba_n_heads": 48,
            "mamba_d_head": 64,
            "mamba_n_groups": 1,
            "mamba_d_state": 256,
            "mamba_d_conv": 4,
            # the checkpoint has 65,537 tokens; the sim keeps 65,536 so its workloads' token ids
            # (drawn below the vocabulary) are unchanged
            "vocab_size": 65_536,
            "max_position_embeddings": 131_072,
        },
        "tiiuae/Falcon-H1-1.5B: attention and Mamba2 in parallel in each of 24 layers (Falcon-H1 "
        "report, arXiv 2507.22448); widths as its config.json (48 Mamba2 heads of 64, d_ssm 3072, "
        "d_state 256, MLP 4608; the transformers FalconH1 docs' model table), vocabulary 65,536 "
        "(the checkpoint's is 65,537)",
    ),
    "qwen3-4b": (
        {
            "model_type": "qwen3",
            "hidden_size": 2560,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "intermediate_size": 9728,
            "vocab_size": 151_936,
            "tie_word_embeddings": True,
            "max_position_embeddings": 40_960,
        },
        "Qwen/Qwen3-4B (full-attention control)",
    ),
}

SIM_MODELS: dict[str, ModelShape] = {
    name: shape_from_config(name, cfg, source) for name, (cfg, source) in PUBLIC_CONFIGS.items()
}
DEFAULT_SIM_MODEL = "qwen3_5-2b"
