"""LFM2 presets, and the layer-type names of its config."""

from __future__ import annotations

from typing import Any

ATTENTION = "full_attention"
CONV = "conv"


def _preset(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model_type": "lfm2",
        "architectures": ["Lfm2ForCausalLM"],
        "torch_dtype": "float32",
        "conv_bias": False,
        "conv_L_cache": 3,
        "norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1_000_000.0},
        "tie_word_embeddings": True,
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.0,
        "initializer_range": 0.02,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "use_cache": True,
    }
    base.update(fields)
    n = base["num_hidden_layers"]
    base["full_attn_idxs"] = [i for i in range(n) if base["layer_types"][i] == ATTENTION]
    return base


_TINY_TYPES = [CONV, ATTENTION, CONV, CONV, ATTENTION]
# LFM2-350M-like interleave: conv-heavy with attention spread through the stack.
_SMALL_TYPES = [CONV, CONV, ATTENTION, CONV, CONV, ATTENTION, CONV, CONV, ATTENTION, CONV, ATTENTION, CONV]

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": _preset(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,  # auto-adjusted: 2/3 -> 128, rounded to block_multiple_of
        block_multiple_of=32,
        num_hidden_layers=len(_TINY_TYPES),
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        layer_types=_TINY_TYPES,
    ),
    "small": _preset(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=3072,  # auto-adjusted: 2/3 -> 2048
        block_multiple_of=256,
        num_hidden_layers=len(_SMALL_TYPES),
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        layer_types=_SMALL_TYPES,
    ),
}
