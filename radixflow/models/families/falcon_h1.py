"""Falcon-H1 (``model_type`` "falcon_h1"): a Mamba2 hybrid (Hugging Face layout, transformers 5.24).

Every layer runs Mamba2 (`radixflow.models.mixers.mamba2`) and RoPE attention in parallel on the same
normed input and adds both, then a SwiGLU MLP; muP multipliers scale the embeddings, the
lm_head, the attention input/output and keys, the SSM input/output, each part of the in_proj
output (z, x, B, C, dt) and the MLP gate/down projections.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch
from radixflow.models.families import schemas
from radixflow.models.families.llama import FALCON_H1_CONTEXT, build_rotary
from radixflow.models.families.mamba2_init import init_weights as init_weights  # the zoo's entry point
from radixflow.models.families.schema_parts import falcon_ssm
from radixflow.models.layers import ACTIVATIONS, Config, RMSNorm, attention_heads, lm_head, run_layers
from radixflow.models.mixers.mamba2 import Mamba2Mixer, Mamba2Spec, as_float
from radixflow.models.presets.falcon_h1 import PRESETS


class FalconRMSNorm(RMSNorm):
    """Falcon-H1 casts the normalised input back to its dtype before the weight multiply (the
    `step.NormSpec` ``cast_first`` order, which `residual` runs); `forward` runs it eagerly
    whatever the kernels."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__(dim, eps, cast_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.spec.eps)
        return self.weight * h.to(x.dtype)


def falcon_mamba_spec(config: Config) -> Mamba2Spec:
    hidden = config.hidden_size
    inner, heads, head_dim = falcon_ssm(config.to_dict())
    if heads * head_dim != inner:  # a Config not read by the loader (`schemas.FALCON_H1` checks it)
        raise ValueError("falcon_h1: mamba_n_heads * mamba_d_head must equal the SSM inner size")
    limit = config.get("time_step_limit") or (0.0, float("inf"))
    groups = config.get("mamba_n_groups", 1)
    rms_norm = bool(config.get("mamba_rms_norm", False))
    return Mamba2Spec(
        hidden=hidden,
        heads=heads,
        head_dim=head_dim,
        d_state=config.get("mamba_d_state", 256),
        groups=groups,
        d_conv=config.get("mamba_d_conv", 4),
        conv_bias=bool(config.get("mamba_conv_bias", True)),
        in_bias=bool(config.get("mamba_proj_bias", False)),
        out_bias=bool(config.get("projectors_bias", False)),
        act=config.get("hidden_act", "silu"),
        dt_min=as_float(limit[0]),
        dt_max=as_float(limit[1]),
        norm="falcon" if rms_norm else "none",
        norm_groups=groups,
        norm_before_gate=bool(config.get("mamba_norm_before_gate", True)),
        eps=config.get("rms_norm_eps", 1e-5),
        in_multiplier=float(config.get("ssm_in_multiplier", 1.0)),
        zxbcdt_multipliers=tuple(float(v) for v in config.get("ssm_multipliers", [1.0] * 5)),
    )


class FalconH1Attention(nn.Module):
    """GQA attention with RoPE and a muP key multiplier."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        bias = bool(config.get("attention_bias", False))
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = attention_heads(config)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.key_multiplier = float(config.get("key_multiplier", 1.0))
        self.rotary = build_rotary(config, self.head_dim, FALCON_H1_CONTEXT)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim) * self.key_multiplier
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        q = self.rotary(q, batch)
        k = self.rotary(k, batch)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.head_dim**-0.5)
        return self.o_proj(out.reshape(t, -1))


class FalconH1MLP(nn.Module):
    """SwiGLU with muP multipliers on the gate input and the down projection output."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        bias = bool(config.get("mlp_bias", False))
        self.gate_proj = nn.Linear(hidden, inter, bias=bias)
        self.up_proj = nn.Linear(hidden, inter, bias=bias)
        self.down_proj = nn.Linear(inter, hidden, bias=bias)
        self.act = ACTIVATIONS[config.get("hidden_act", "silu")]
        gate_mult, down_mult = config.get("mlp_multipliers", [1.0, 1.0])
        self.gate_multiplier, self.down_multiplier = float(gate_mult), float(down_mult)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.up_proj(x) * self.act(self.gate_proj(x) * self.gate_multiplier)
        return self.down_proj(y) * self.down_multiplier


class FalconH1DecoderLayer(nn.Module):
    """Mamba2 and attention side by side on one normed input, then the MLP."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-5)
        self.feed_forward = FalconH1MLP(config)
        self.mamba = Mamba2Mixer(falcon_mamba_spec(config), layer_idx)
        self.self_attn = FalconH1Attention(config, layer_idx)
        self.input_layernorm = FalconRMSNorm(config.hidden_size, eps)
        self.pre_ff_layernorm = FalconRMSNorm(config.hidden_size, eps)
        self.attn_in = float(config.get("attention_in_multiplier", 1.0))
        self.attn_out = float(config.get("attention_out_multiplier", 1.0))
        self.ssm_out = float(config.get("ssm_out_multiplier", 1.0))

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        h = self.input_layernorm(x)
        mixed = self.mamba(h, batch) * self.ssm_out
        mixed = mixed + self.self_attn(h * self.attn_in, batch) * self.attn_out
        x = x + mixed
        return x + self.feed_forward(self.pre_ff_layernorm(x))


class FalconH1Model(nn.Module):
    """``model.*`` of the checkpoint."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(FalconH1DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_layernorm = FalconRMSNorm(config.hidden_size, config.get("rms_norm_eps", 1e-5))
        self.embedding_multiplier = float(config.get("embedding_multiplier", 1.0))

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        x = self.embed_tokens(batch.input_ids) * self.embedding_multiplier
        return run_layers(x, self.layers, self.final_layernorm, batch)


class FalconH1ForCausalLM(nn.Module):
    """Falcon-H1: parallel Mamba2 + attention in every layer, muP multipliers throughout."""

    PRESETS: dict[str, dict[str, Any]]  # set below
    config_schema = schemas.FALCON_H1
    config_defaults = schemas.FALCON_H1_DEFAULTS

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = FalconH1Model(config)
        self.lm_head = lm_head(config, self.model.embed_tokens, config.get("tie_word_embeddings", False))
        self.lm_head_multiplier = float(config.get("lm_head_multiplier", 1.0))

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {i: layer.mamba.state_shapes() for i, layer in enumerate(self.model.layers)}

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.model(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (self.lm_head(hidden) * self.lm_head_multiplier).float()


# ---------------------------------------------------------------------------------------------
# Presets (radixflow.models.presets.falcon_h1), also on the class


FalconH1ForCausalLM.PRESETS = PRESETS
