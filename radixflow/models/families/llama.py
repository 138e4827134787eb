"""Full-attention control models: Llama and Qwen3 (Hugging Face parameter layout).

Both are pre-norm decoder stacks of GQA attention with RoPE and a SwiGLU MLP. Qwen3 adds a
per-head RMSNorm on queries and keys (``q_norm``/``k_norm``) and an explicit ``head_dim`` that may
differ from ``hidden_size // num_attention_heads``. Neither has recurrent layers, so the state
layout is empty and snapshots are ignored: a continuation just reuses the KV blocks.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch
from radixflow.models.families import schemas
from radixflow.models.layers import (
    Config,
    GatedMLP,
    RMSNorm,
    Rotary,
    attention_heads,
    lm_head,
    rope_parameters,
)
from radixflow.models.presets.llama import PRESETS as PRESETS  # the zoo reads them here
from radixflow.models.presets.llama import PRESETS_LLAMA as PRESETS_LLAMA
from radixflow.models.presets.llama import PRESETS_QWEN3 as PRESETS_QWEN3

# ---------------------------------------------------------------------------------------------
# RoPE configuration


# What each family's transformers config class reads where config.json leaves out
# max_position_embeddings: llama3 rope's original context then, where no key names one
# (`standardize_rope_params`). Not a context limit: the runner keeps its own.
LLAMA_CONTEXT = 2048
QWEN3_CONTEXT = 32768
FALCON_H1_CONTEXT = 8192


def build_rotary(config: Config, head_dim: int, default_context: int) -> Rotary:
    """A `Rotary` whose inverse frequencies follow the config's ``rope_type``; ``default_context``:
    the family's max_position_embeddings where the config has none."""
    params = rope_parameters(config)
    rotary = Rotary(head_dim, float(params["rope_theta"]))
    kind = params["rope_type"]
    if kind == "default":
        return rotary
    if kind == "linear":
        rotary.inv_freq = rotary.inv_freq / float(params["factor"])
        return rotary
    if kind == "llama3":
        old_len = params.get("original_max_position_embeddings")
        old_len = old_len or config.get("max_position_embeddings", default_context)
        rotary.inv_freq = _llama3_inv_freq(rotary.inv_freq, params, float(old_len))
        return rotary
    raise NotImplementedError(f"rope_type {kind!r} is not supported (default, linear, llama3 are)")


def _llama3_inv_freq(inv_freq: torch.Tensor, params: dict[str, Any], old_len: float) -> torch.Tensor:
    """Llama 3.1 frequency scaling: long wavelengths divided by ``factor``, a smooth ramp between
    (``old_len``: the original context)."""
    factor = float(params["factor"])
    low, high = float(params["low_freq_factor"]), float(params["high_freq_factor"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


# ---------------------------------------------------------------------------------------------
# Modules (attribute names are the Hugging Face parameter names)


class Attention(nn.Module):
    """GQA self-attention over the paged KV cache; optional per-head q/k RMSNorm (Qwen3)."""

    def __init__(self, config: Config, layer_idx: int, qk_norm: bool, default_context: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = attention_heads(config)
        bias = bool(config.get("attention_bias", False))
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        eps = config.get("rms_norm_eps", 1e-6)
        self.q_norm = RMSNorm(self.head_dim, eps, cast_first=True) if qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, eps, cast_first=True) if qk_norm else None
        self.rotary = build_rotary(config, self.head_dim, default_context)
        self.scale = self.head_dim**-0.5

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # each norm and rotation one call
            q, k = self.q_norm.rotated(q, self.rotary, batch), self.k_norm.rotated(k, self.rotary, batch)
        else:
            q, k = self.rotary(q, batch), self.rotary(k, batch)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.scale)
        return self.o_proj(out.reshape(t, self.num_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, config: Config, layer_idx: int, qk_norm: bool, mlp_bias: bool, context: int) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-6)
        self.self_attn = Attention(config, layer_idx, qk_norm, context)
        self.mlp = GatedMLP(
            config.hidden_size,
            config.intermediate_size,
            bias=mlp_bias,
            act=config.get("hidden_act", "silu"),
        )
        self.input_layernorm = RMSNorm(config.hidden_size, eps, cast_first=True)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, cast_first=True)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    """``model.*`` of the checkpoint: embeddings, layers, final norm."""

    def __init__(self, config: Config, qk_norm: bool, mlp_bias: bool, context: int) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, qk_norm, mlp_bias, context) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.get("rms_norm_eps", 1e-6), cast_first=True)

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """The layers in turn, each residual add fused with the norm after it (the layer's
        post-attention norm; the next layer's input norm, the last one's with ``norm``): one
        kernel call where there were two, the same sums and norms as `DecoderLayer.forward`."""
        x = self.embed_tokens(batch.input_ids)
        layers: list[DecoderLayer] = list(self.layers)  # type: ignore[arg-type]
        if not layers:
            return self.norm(x)
        h = layers[0].input_layernorm(x)
        after_mlp = [layer.input_layernorm for layer in layers[1:]] + [self.norm]
        for layer, norm in zip(layers, after_mlp, strict=True):
            x, h = layer.post_attention_layernorm.residual(x, layer.self_attn(h, batch))
            x, h = norm.residual(x, layer.mlp(h))
        return h


class _FullAttentionLM(nn.Module):
    """Shared body of the two control families; subclasses pick ``qk_norm`` and the context their
    config class reads where config.json has none."""

    qk_norm = False
    default_context = LLAMA_CONTEXT
    config_schema = schemas.FULL_ATTENTION
    config_defaults = schemas.LLAMA_DEFAULTS

    def __init__(self, config: Config) -> None:
        super().__init__()
        if config.get("use_sliding_window", False):
            raise NotImplementedError("sliding-window attention is not supported")
        self.config = config
        # mlp_bias only where the family's schema reads it (transformers' Qwen3 ignores the key)
        reads_mlp_bias = any(f.name == "mlp_bias" for f in self.config_schema.fields)
        mlp_bias = reads_mlp_bias and bool(config.get("mlp_bias", False))
        self.model = DecoderModel(config, self.qk_norm, mlp_bias, self.default_context)
        self.lm_head = lm_head(config, self.model.embed_tokens, config.get("tie_word_embeddings", False))

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {}  # no recurrent layers: checkpoints carry nothing, KV blocks carry everything

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.model(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


class LlamaForCausalLM(_FullAttentionLM):
    """Llama (also SmolLM2): GQA attention, RoPE, SwiGLU."""

    qk_norm = False


class Qwen3ForCausalLM(_FullAttentionLM):
    """Qwen3 dense: Llama plus per-head q/k RMSNorm and an explicit ``head_dim``."""

    qk_norm = True
    default_context = QWEN3_CONTEXT
    config_schema = schemas.QWEN3
    config_defaults = schemas.QWEN3_DEFAULTS


# ---------------------------------------------------------------------------------------------
# Init (the presets are in radixflow.models.presets.llama)


def init_weights(model: nn.Module, generator: torch.Generator, logit_std: float = 4.0) -> None:
    """Deterministic init with peaked next-token distributions.

    Linear layers get std ``1/sqrt(fan_in)`` so every sublayer adds O(1) to the residual stream
    (attention scores have unit scale, so attention is neither uniform nor one-hot). The output
    matrix gets std ``logit_std/sqrt(hidden)``: after the final RMSNorm the logits then have std
    ~``logit_std``, which makes typical top-1 margins O(1) instead of ~1e-3. Norm weights are 1,
    biases 0. With tied embeddings the shared matrix uses the lm_head scale.
    """
    hidden = model.config.hidden_size
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied aliases are visited once
            if name == "lm_head.weight" or (tied and name == "model.embed_tokens.weight"):
                std = logit_std / math.sqrt(hidden)
            elif name == "model.embed_tokens.weight":
                std = 1.0
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            elif name.endswith(".bias"):
                p.zero_()
                continue
            else:
                std = 1.0 / math.sqrt(p.shape[1])
            p.copy_(torch.randn(p.shape, generator=generator) * std)
