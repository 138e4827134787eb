"""Qwen3.5 presets, and the config parts Qwen3-Next's presets share."""

from __future__ import annotations

from typing import Any


def base_config(
    hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, vocab: int
) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "max_position_embeddings": 8192,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        "linear_conv_kernel_dim": 4,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }


def hybrid_types(layers: int, interval: int) -> list[str]:
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]


def linear_config(k_heads: int, v_heads: int, k_dim: int, v_dim: int) -> dict[str, int]:
    return {
        "linear_num_key_heads": k_heads,
        "linear_num_value_heads": v_heads,
        "linear_key_head_dim": k_dim,
        "linear_value_head_dim": v_dim,
    }


_QWEN35 = {"model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"]}

PRESETS: dict[str, dict[str, Any]] = {
    # 2 DeltaNet + 2 attention layers, tied embeddings, grouped value heads in the DeltaNet
    "tiny": {
        **_QWEN35,
        **base_config(64, 4, 4, 2, 16, 512),
        **linear_config(2, 4, 16, 16),
        "intermediate_size": 128,
        "layer_types": hybrid_types(4, 2),
        "tie_word_embeddings": True,
    },
    # ~50M parameters, the real 3:1 DeltaNet:attention pattern
    "small": {
        **_QWEN35,
        **base_config(512, 12, 8, 2, 64, 8192),
        **linear_config(4, 8, 64, 64),
        "intermediate_size": 1536,
        "layer_types": hybrid_types(12, 4),
        "tie_word_embeddings": False,
    },
}
