"""What each family reads from ``config.json``: one `Schema` per family, checked on load.

The schemas are assembled from the parts the families share (`schema_parts`: every model's sizes,
an attention layer's heads, a rotary embedding's settings, a Gated DeltaNet's heads) plus each
family's own fields and relations. Each family's model class names its schema as
``config_schema``; the loader checks a checkpoint's config against it before building anything
(`validate_config`). A field the code reads with a default is optional here; one it reads without
is required. The layer patterns are decoded by `layer_patterns`, for the checks and the model alike.
"""

from __future__ import annotations

from typing import Any

from radixflow.models.config_rules import (
    Allowed,
    AtMost,
    Divides,
    HasLayer,
    LayerCount,
    OneOf,
    RequiredWhen,
    When,
    each_when,
)
from radixflow.models.config_schema import ConfigField, Schema
from radixflow.models.config_types import AnyOf, Bool, Float, Int, ListOf, Str
from radixflow.models.families.layer_patterns import (
    HYBRID_KINDS,
    LFM2_KINDS,
    NEMOTRON_FIELDS,
    NEMOTRON_GROUPS,
    NEMOTRON_KINDS,
    NEMOTRON_LEGACY,
    hybrid_kinds,
    lfm2_kinds,
    nemotron_kinds,
)
from radixflow.models.families.schema_parts import (
    ACTIVATION,
    ATTENTION,
    BASE,
    CONV_KERNEL,
    DELTANET,
    EPS,
    EXPERTS,
    FALCON_SSM_HEADS,
    HYBRID_ATTENTION,
    LAYERS,
    MAX_EXPERTS,
    MULTIPLIER,
    NEMOTRON_ROUTER,
    NEXT_MOE_LAYERS,
    PARTIAL_ROPE,
    PLAIN_ROPE,
    POSITIVE,
    SCALED_ROPE,
    FalconSsmHeads,
)
from radixflow.models.presets.nemotron_h import NEMOTRON_PATTERN  # the pattern string's codes

# What transformers' config class of a family fills in for a key config.json leaves out, where
# that is not what the code would derive (every query head its own KV head, head_dim = hidden /
# heads): a family's ``config_defaults``, added by the loader before the checks.
LLAMA_DEFAULTS: dict[str, Any] = {}  # LlamaConfig derives both
QWEN3_DEFAULTS = {"num_key_value_heads": 32, "head_dim": 128}
QWEN3_5_DEFAULTS = {"num_key_value_heads": 4, "head_dim": 256}
# Qwen3NextConfig's MoE: a config without num_experts is 512 experts on every layer, never dense
QWEN3_NEXT_DEFAULTS = {
    "num_key_value_heads": 2,
    "head_dim": 256,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
}
LFM2_DEFAULTS = {"num_key_value_heads": 8}
NEMOTRON_H_DEFAULTS = {"num_key_value_heads": 8, "head_dim": 128}
# FalconH1Config sets mamba_d_ssm 1024 when it is left out; only a null derives expand x hidden
FALCON_H1_DEFAULTS = {"num_key_value_heads": 8, "mamba_d_ssm": 1024}

# --------------------------------------------------------------------------- Llama, Qwen3

# Every layer is full attention; transformers writes Qwen3's ``layer_types`` ("sliding_attention"
# only with a sliding window, which is not supported).
FULL_ATTENTION = BASE.merged(
    ATTENTION,
    SCALED_ROPE,
    Schema(
        (
            ConfigField("num_hidden_layers", LAYERS, required=True),
            ConfigField("layer_types", ListOf(Str(("full_attention",)))),
            ConfigField(
                "use_sliding_window", Bool(only=False, why="sliding-window attention is not supported")
            ),
            ConfigField("intermediate_size", Int(1), required=True),
            ConfigField("mlp_bias", Bool()),
            ConfigField("hidden_act", ACTIVATION),
            ConfigField("rms_norm_eps", EPS),
        ),
        rules=(LayerCount(("layer_types",)),),
    ),
)

# Qwen3: transformers' Qwen3MLP has no biases and Qwen3Config no mlp_bias; a config.json that
# holds one (copied from a Llama config) is read as transformers reads it, the key ignored
QWEN3 = Schema(
    tuple(f for f in FULL_ATTENTION.fields if f.name != "mlp_bias"),
    FULL_ATTENTION.rules,
    FULL_ATTENTION.layer_kinds,
)

# --------------------------------------------------------------------------- Qwen3.5, Qwen3-Next

QWEN3_5 = BASE.merged(
    HYBRID_ATTENTION,
    PARTIAL_ROPE,
    DELTANET,
    Schema(
        (
            ConfigField("num_hidden_layers", LAYERS, required=True),
            ConfigField("layer_types", ListOf(Str(HYBRID_KINDS))),
            ConfigField("full_attention_interval", Int(1)),
            ConfigField("intermediate_size", Int(1), required=True),
            ConfigField("hidden_act", ACTIVATION),
            ConfigField("rms_norm_eps", EPS),
        ),
        rules=(
            LayerCount(("layer_types",)),
            # transformers runs the DeltaNet's conv with hidden_act; ours (every kernel
            # backend) runs SiLU
            When(
                HasLayer("linear_attention"),
                Allowed("hidden_act", ("silu", "swish"), "the activation of the Gated DeltaNet layers"),
            ),
        ),
        layer_kinds=hybrid_kinds,
    ),
)

_NEXT_MOE = ("num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")
QWEN3_NEXT = QWEN3_5.merged(
    Schema(
        (
            ConfigField("num_experts", Int(0, high=MAX_EXPERTS)),  # 0 (given): every layer dense
            *(ConfigField(name, Int(1)) for name in _NEXT_MOE),
            ConfigField("decoder_sparse_step", Int(1)),
            ConfigField("mlp_only_layers", ListOf(Int(0))),
            ConfigField("norm_topk_prob", Bool()),
        ),
        rules=(
            RequiredWhen(_NEXT_MOE, NEXT_MOE_LAYERS),
            When(NEXT_MOE_LAYERS, AtMost("num_experts_per_tok", "num_experts")),
            AtMost("mlp_only_layers", "num_hidden_layers", strict=True),
        ),
    )
)

# --------------------------------------------------------------------------- LFM2

LFM2 = BASE.merged(
    HYBRID_ATTENTION,
    PLAIN_ROPE,
    Schema(
        (
            ConfigField("num_hidden_layers", LAYERS, required=True),
            ConfigField("layer_types", ListOf(Str(LFM2_KINDS))),
            ConfigField("full_attn_idxs", ListOf(Int(0))),
            ConfigField("intermediate_size", Int(1), required=True, aliases=("block_ff_dim",)),
            # LFM2's own spelling, read first where both are set (as transformers' Lfm2Config does)
            ConfigField("block_ff_dim", Int(1)),
            ConfigField("block_auto_adjust_ff_dim", Bool()),
            ConfigField("block_ffn_dim_multiplier", POSITIVE),
            ConfigField("block_multiple_of", Int(1)),
            ConfigField("norm_eps", EPS),
            ConfigField("conv_bias", Bool()),
            ConfigField("conv_L_cache", CONV_KERNEL),
            ConfigField("tie_embedding", Bool()),
        ),
        rules=(
            LayerCount(("layer_types",)),
            AtMost("full_attn_idxs", "num_hidden_layers", strict=True),
        ),
        layer_kinds=lfm2_kinds,
    ),
)

# --------------------------------------------------------------------------- Nemotron-H

_NEMOTRON_MOE = (
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "moe_shared_expert_intermediate_size",
)
_MAMBA = HasLayer("linear_attention")  # Nemotron-H's Mamba2 layers, as `nemotron_kinds` names them
# Older spellings are aliases. The layer count comes from the pattern (transformers ignores
# num_hidden_layers); where both are given they must agree.
NEMOTRON_H = BASE.merged(
    Schema(HYBRID_ATTENTION.fields),  # its heads' relations once the pattern is read (below)
    Schema(
        (
            ConfigField("num_hidden_layers", LAYERS),
            ConfigField(
                "layers_block_type",
                ListOf(Str((*NEMOTRON_KINDS, *NEMOTRON_LEGACY)), min_length=1),
                read_first=NEMOTRON_FIELDS["pattern"][:1],
            ),
            ConfigField("hybrid_override_pattern", Str(alphabet="".join(NEMOTRON_PATTERN), min_length=1)),
            ConfigField("layer_norm_epsilon", EPS),
            ConfigField("intermediate_size", Int(1)),
            ConfigField("mlp_bias", Bool()),
            ConfigField("mlp_hidden_act", ACTIVATION),
            ConfigField("mamba_num_heads", Int(1)),
            ConfigField("mamba_head_dim", Int(1)),
            # the older mamba_* spelling first: where a config has both, transformers'
            # NemotronHConfig takes it over the current one (NEMOTRON_FIELDS)
            ConfigField("n_groups", Int(1), read_first=NEMOTRON_FIELDS["groups"][:1]),
            ConfigField("ssm_state_size", Int(1)),
            ConfigField("conv_kernel", CONV_KERNEL, read_first=NEMOTRON_FIELDS["conv_kernel"][:1]),
            ConfigField("use_conv_bias", Bool(), read_first=NEMOTRON_FIELDS["conv_bias"][:1]),
            ConfigField("use_bias", Bool()),
            ConfigField("mamba_hidden_act", ACTIVATION),
            ConfigField("time_step_min", Float(low=0.0), read_first=NEMOTRON_FIELDS["dt_min"][:1]),
            ConfigField("n_routed_experts", EXPERTS, read_first=NEMOTRON_FIELDS["experts"][:1]),
            *(ConfigField(name, Int(1)) for name in _NEMOTRON_MOE[1:]),
            ConfigField("moe_latent_size", Int(1)),
            ConfigField("n_group", Int(1)),
            ConfigField("topk_group", Int(1)),
            ConfigField("norm_topk_prob", Bool()),
            ConfigField("routed_scaling_factor", MULTIPLIER),
        ),
        rules=(
            OneOf(("layers_block_type", "hybrid_override_pattern")),
            LayerCount(("layers_block_type", "hybrid_override_pattern")),
            *HYBRID_ATTENTION.rules,
            RequiredWhen(("mamba_num_heads", "mamba_head_dim"), _MAMBA),
            RequiredWhen(("intermediate_size",), HasLayer("mlp")),
            RequiredWhen(_NEMOTRON_MOE, HasLayer("moe")),
            When(_MAMBA, Divides("n_groups", "mamba_num_heads", default=NEMOTRON_GROUPS)),
            *each_when(HasLayer("moe"), NEMOTRON_ROUTER),
        ),
        layer_kinds=nemotron_kinds,
    ),
)

# --------------------------------------------------------------------------- Falcon-H1

_FALCON_MULTIPLIERS = (
    "key_multiplier",
    "attention_in_multiplier",
    "attention_out_multiplier",
    "ssm_in_multiplier",
    "ssm_out_multiplier",
    "embedding_multiplier",
    "lm_head_multiplier",
)
_FALCON_FLAGS = (
    "mlp_bias",
    "mamba_rms_norm",
    "mamba_conv_bias",
    "mamba_proj_bias",
    "projectors_bias",
    "mamba_norm_before_gate",
)
# Every layer runs Mamba2 and attention side by side (no pattern). time_step_limit may be
# infinite: a clamp that never binds.
FALCON_H1 = BASE.merged(
    ATTENTION,
    SCALED_ROPE,
    Schema(
        (
            ConfigField("num_hidden_layers", LAYERS, required=True),
            ConfigField("intermediate_size", Int(1), required=True),
            ConfigField("hidden_act", ACTIVATION),
            ConfigField("rms_norm_eps", EPS),
            *(ConfigField(name, MULTIPLIER) for name in _FALCON_MULTIPLIERS),
            *(ConfigField(name, Bool()) for name in _FALCON_FLAGS),
            ConfigField("mlp_multipliers", ListOf(MULTIPLIER, length=2)),
            ConfigField("ssm_multipliers", ListOf(MULTIPLIER, length=5)),
            ConfigField("mamba_d_ssm", Int(1)),
            ConfigField("mamba_expand", Int(1)),
            ConfigField("mamba_n_heads", Int(1)),
            ConfigField("mamba_d_head", AnyOf((Int(1), Str(("auto",))))),
            ConfigField("mamba_n_groups", Int(1)),
            ConfigField("mamba_d_state", Int(1)),
            ConfigField("mamba_d_conv", CONV_KERNEL),
            ConfigField("time_step_limit", ListOf(Float(low=0.0, finite=False), length=2)),
        ),
        # left out, FalconH1Config's 128 SSM heads (`schema_parts.falcon_ssm`)
        rules=(
            FalconSsmHeads(),
            Divides("mamba_n_groups", "mamba_n_heads", multiple_default=FALCON_SSM_HEADS),
        ),
    ),
)
