"""Gated softmax attention (``self_attn``) of the Qwen3.5 and Qwen3-Next hybrids."""

from __future__ import annotations

import torch
from torch import nn

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch
from radixflow.models.layers import Config, RMSNorm, Rotary, attention_heads, rope_parameters


def rope_settings(config: Config) -> tuple[float, float]:
    """``(rope_theta, partial_rotary_factor)`` as transformers reads them (`layers.rope_parameters`).

    Qwen3.5's multimodal rope (``mrope_section``) reduces to plain rope for text-only positions,
    because all three position streams are equal.
    """
    params = rope_parameters(config)
    if params["rope_type"] != "default":
        raise NotImplementedError(f"rope_type {params['rope_type']!r} is not supported")
    return float(params["rope_theta"]), float(params.get("partial_rotary_factor", 0.25))


class GatedAttention(nn.Module):
    """Softmax attention with a sigmoid output gate (packed into ``q_proj``), ``1 + w`` q/k norms
    and partial rotary embedding."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        hidden = config.hidden_size
        self.num_heads, self.num_kv_heads, self.head_dim = attention_heads(config)
        bias = config.get("attention_bias", False)
        eps = config.get("rms_norm_eps", 1e-6)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim * 2, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, eps, offset=1.0, cast_first=False)
        self.k_norm = RMSNorm(self.head_dim, eps, offset=1.0, cast_first=False)
        theta, partial = rope_settings(config)
        self.rotary = Rotary(self.head_dim, theta, partial)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t, hd = x.shape[0], self.head_dim
        q, gate = self.q_proj(x).view(t, self.num_heads, 2 * hd).split(hd, dim=-1)
        q = self.q_norm.rotated(q, self.rotary, batch)  # norm and rotation: one call each
        k = self.k_norm.rotated(self.k_proj(x).view(t, self.num_kv_heads, hd), self.rotary, batch)
        v = self.v_proj(x).view(t, self.num_kv_heads, hd)
        o = paged_attention(self.layer_idx, q, k, v, batch, hd**-0.5)
        o = o.reshape(t, -1) * torch.sigmoid(gate.reshape(t, -1))
        return self.o_proj(o)
