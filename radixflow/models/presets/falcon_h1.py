"""Falcon-H1 presets."""

from __future__ import annotations

from typing import Any

from radixflow.models.presets.mamba2 import common_config


def _falcon(**fields: Any) -> dict[str, Any]:
    base = common_config("falcon_h1", "FalconH1ForCausalLM")
    base.update(
        hidden_act="silu",
        rms_norm_eps=1e-5,
        attention_bias=False,
        attention_dropout=0.0,
        mlp_bias=False,
        mamba_d_conv=4,
        mamba_expand=2,
        mamba_conv_bias=True,
        mamba_proj_bias=False,
        projectors_bias=False,
        num_logits_to_keep=1,
        # muP multipliers in the style of the released Falcon-H1 configs (all != 1 so that the
        # reference comparison checks each of them).
        embedding_multiplier=2.0,
        lm_head_multiplier=0.25,
        key_multiplier=0.5,
        attention_in_multiplier=0.8,
        attention_out_multiplier=0.9,
        ssm_in_multiplier=1.25,
        ssm_out_multiplier=0.5,
        ssm_multipliers=[0.35, 0.25, 0.35, 0.5, 0.35],
        mlp_multipliers=[0.9, 0.6],
    )
    base.update(fields)
    return base


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": _falcon(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        mamba_d_ssm=128,
        mamba_n_heads=8,
        mamba_d_head=16,
        mamba_n_groups=2,
        mamba_d_state=16,
        mamba_chunk_size=32,
        mamba_rms_norm=True,
        mamba_norm_before_gate=True,
        # Both clamps bind for some tokens under init_weights (dt spans about 1e-3..1e-1).
        time_step_limit=[0.002, 0.08],
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    ),
    "small": _falcon(
        vocab_size=8192,
        hidden_size=512,
        num_hidden_layers=10,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=1536,
        mamba_d_ssm=1024,
        mamba_n_heads=16,
        mamba_d_head=64,
        mamba_n_groups=1,
        mamba_d_state=64,
        mamba_chunk_size=128,
        mamba_rms_norm=False,
        mamba_norm_before_gate=False,
        time_step_limit=[0.0, 1e4],
        max_position_embeddings=8192,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0},
    ),
}
