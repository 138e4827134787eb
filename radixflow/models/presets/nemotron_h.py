"""Nemotron-H presets, and the layer codes of its ``hybrid_override_pattern``."""

from __future__ import annotations

from typing import Any

from radixflow.models.presets.mamba2 import common_config

# a code of the pattern string -> the layer kind it names (``layers_block_type``)
NEMOTRON_PATTERN = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _nemotron(layers: str, **fields: Any) -> dict[str, Any]:
    base = common_config("nemotron_h", "NemotronHForCausalLM")
    base.update(
        layers_block_type=[NEMOTRON_PATTERN[ch] for ch in layers],
        num_hidden_layers=len(layers),
        mlp_hidden_act="relu2",
        mamba_hidden_act="silu",
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
        use_bias=False,
        use_conv_bias=True,
        conv_kernel=4,
        expand=2,
        time_step_min=0.001,
        time_step_max=0.1,
        time_step_floor=1e-4,
        layer_norm_epsilon=1e-5,
        residual_in_fp32=False,
        rescale_prenorm_residual=True,
        sliding_window=None,
        num_logits_to_keep=1,
    )
    base.update(fields)
    return base


# MoE fields of a preset without "E" layers: unused, spelled out so the config is complete.
_NEMOTRON_MOE_UNUSED: dict[str, Any] = {
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "moe_shared_expert_intermediate_size": 256,
    "moe_latent_size": None,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
}

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": _nemotron(
        "M-*ME*M",
        vocab_size=512,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        mamba_num_heads=8,
        mamba_head_dim=16,
        ssm_state_size=16,
        n_groups=2,
        chunk_size=32,
        max_position_embeddings=4096,
        # MoE: 8 experts in 2 groups, routing limited to the best group, latent projections.
        n_routed_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=64,
        moe_latent_size=32,
        n_group=2,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
    ),
    "small": _nemotron(
        "M-M-M*-M-M-M*-M-M-M*-M-",
        vocab_size=8192,
        hidden_size=512,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=2048,
        mamba_num_heads=16,
        mamba_head_dim=64,
        ssm_state_size=64,
        n_groups=4,
        chunk_size=128,
        max_position_embeddings=8192,
        **_NEMOTRON_MOE_UNUSED,
    ),
}
