"""Small transformers configs unlike the zoo's presets, shared by the tests that build a model
with transformers and compare ours with it (`test_saved_by_transformers`, `test_bf16_norms`).

A plain module (not a conftest): pytest's ``pythonpath`` (pyproject.toml) puts ``tests/`` on
``sys.path``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

VOCAB = 101
_DELTANET = {"linear_num_key_heads": 1, "linear_num_value_heads": 3, "linear_key_head_dim": 12}
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama-gqa3": (
        "LlamaConfig",
        {
            "hidden_size": 36,
            "num_hidden_layers": 2,
            "num_attention_heads": 6,
            "num_key_value_heads": 2,
            "head_dim": 10,
            "intermediate_size": 50,
            "rms_norm_eps": 0.05,
            "attention_bias": True,
            "mlp_bias": True,
            "tie_word_embeddings": True,
        },
    ),
    "qwen3-untied": (
        "Qwen3Config",
        {
            "hidden_size": 24,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "head_dim": 12,
            "intermediate_size": 40,
            "tie_word_embeddings": False,
            "attention_bias": True,
            "mlp_bias": True,  # not a Qwen3 field: its MLP has no biases whatever config.json says
        },
    ),
    "qwen3_5-ratio3": (
        "Qwen3_5TextConfig",
        {
            "hidden_size": 30,
            "num_hidden_layers": 3,
            "num_attention_heads": 3,
            "num_key_value_heads": 1,
            "head_dim": 10,
            "intermediate_size": 44,
            **_DELTANET,
            "linear_value_head_dim": 6,
            "linear_conv_kernel_dim": 5,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5},
            "tie_word_embeddings": True,
        },
    ),
    "qwen3_next-moe": (
        "Qwen3NextConfig",
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 40,
            **_DELTANET,
            "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 2,
            "layer_types": ["linear_attention", "full_attention"],
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24,
            "norm_topk_prob": False,
        },
    ),
    "lfm2-k2": (
        "Lfm2Config",
        {
            "hidden_size": 30,
            "num_hidden_layers": 3,
            "num_attention_heads": 3,
            "num_key_value_heads": 1,
            "intermediate_size": 60,
            "block_multiple_of": 8,
            "conv_L_cache": 2,
            "conv_bias": True,
            "layer_types": ["conv", "full_attention", "conv"],
            "norm_eps": 0.05,
        },
    ),
    "nemotron_h-groups3": (
        "NemotronHConfig",
        {
            "hidden_size": 28,
            "layers_block_type": ["mamba", "attention", "moe", "mlp", "mamba"],
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 36,
            "mamba_num_heads": 6,
            "mamba_head_dim": 4,
            "n_groups": 3,
            "ssm_state_size": 8,
            "conv_kernel": 3,
            "chunk_size": 16,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 12,
            "moe_shared_expert_intermediate_size": 20,
            "use_bias": True,
        },
    ),
    "falcon_h1-mup": (
        "FalconH1Config",
        {
            "hidden_size": 24,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "intermediate_size": 40,
            "mamba_d_ssm": 24,
            "mamba_n_heads": 3,
            "mamba_d_head": "auto",
            "mamba_n_groups": 3,
            "mamba_d_state": 4,
            "mamba_d_conv": 5,
            "mamba_chunk_size": 16,
            "mamba_rms_norm": True,
            "mamba_norm_before_gate": False,
            "time_step_limit": [0.01, 0.5],
            "ssm_multipliers": [1.0, 0.5, 1.5, 1.0, 0.7],
            "mlp_multipliers": [0.8, 1.2],
            "key_multiplier": 0.6,
            "embedding_multiplier": 2.0,
            "lm_head_multiplier": 0.5,
            "tie_word_embeddings": True,
        },
    ),
}


def spread(model: torch.nn.Module, seed: int) -> None:
    """Weights far from transformers' tiny init, so a wrong piece shows at O(1): linear layers
    variance-preserving, norms and biases jittered, logits with a spread of ~2."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
            elif "embed" in name or "lm_head" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 2 / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p[0].numel()))


def save_reference(name: str, path: Path) -> torch.nn.Module:
    """transformers' float32 model of ``CONFIGS[name]`` with `spread` weights (eval mode), after
    its own ``save_pretrained`` wrote it to ``path``."""
    import transformers

    cls, fields = CONFIGS[name]
    config = getattr(transformers, cls)(vocab_size=VOCAB, max_position_embeddings=512, **fields)
    torch.manual_seed(0)
    ref = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    spread(ref, 1)
    ref.save_pretrained(path)
    return ref.eval()
