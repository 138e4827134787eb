"""Llama and Qwen3 presets (the full-attention controls)."""

from __future__ import annotations

from typing import Any


def _preset(model_type: str, arch: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [arch],
        "torch_dtype": "float32",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        # Special ids follow the zoo tokenizer (radixflow.models.io.tokenizer): 0 is <|endoftext|>.
        "bos_token_id": 0,
        "eos_token_id": 0,
        "pad_token_id": 0,
    }
    base.update(fields)
    return base


PRESETS_LLAMA: dict[str, dict[str, Any]] = {
    "tiny": _preset(
        "llama",
        "LlamaForCausalLM",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        mlp_bias=False,
        pretraining_tp=1,
        tie_word_embeddings=False,
    ),
    "small": _preset(
        "llama",
        "LlamaForCausalLM",
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=12,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
        mlp_bias=False,
        pretraining_tp=1,
        tie_word_embeddings=False,
    ),
}

PRESETS_QWEN3: dict[str, dict[str, Any]] = {
    "tiny": _preset(
        "qwen3",
        "Qwen3ForCausalLM",
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # explicit and != hidden / heads, as in real Qwen3 checkpoints
        max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=2,
        layer_types=["full_attention"] * 2,
        tie_word_embeddings=True,
    ),
    "small": _preset(
        "qwen3",
        "Qwen3ForCausalLM",
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=10,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=10,
        layer_types=["full_attention"] * 10,
        tie_word_embeddings=True,
    ),
}

# The zoo looks for ``PRESETS`` by default; this module serves two families.
PRESETS = PRESETS_LLAMA
