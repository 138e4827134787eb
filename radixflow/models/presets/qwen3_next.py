"""Qwen3-Next presets: the Qwen3.5 stack with a sparse MoE MLP."""

from __future__ import annotations

from typing import Any

from radixflow.models.presets.qwen3_5 import base_config, hybrid_types, linear_config

_NEXT = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}

PRESETS: dict[str, dict[str, Any]] = {
    # layer 2 uses the dense MLP (mlp_only_layers) so both MLP kinds are covered
    "tiny": {
        **_NEXT,
        **base_config(64, 4, 4, 2, 16, 512),
        **linear_config(2, 4, 16, 16),
        "intermediate_size": 128,
        "layer_types": hybrid_types(4, 2),
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [2],
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    },
    "small": {
        **_NEXT,
        **base_config(512, 8, 8, 2, 64, 8192),
        **linear_config(4, 8, 64, 64),
        "intermediate_size": 1024,
        "layer_types": hybrid_types(8, 4),
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 384,
        "shared_expert_intermediate_size": 384,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "router_aux_loss_coef": 0.001,
        "output_router_logits": False,
        "tie_word_embeddings": False,
    },
}
