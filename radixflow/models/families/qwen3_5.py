"""Qwen3.5 text (``model_type`` "qwen3_5_text"): Gated DeltaNet linear attention mixed with gated
full attention, dense MLP. Also the layer stack, init and preset helpers Qwen3-Next shares.

``layer_types`` (or ``full_attention_interval``) decides per layer whether the token mixer is a
Gated DeltaNet (``linear_attn``, `radixflow.models.mixers.gated_deltanet`) or a gated softmax attention
(``self_attn``, `radixflow.models.mixers.gated_attention`). A family is the pair (DeltaNet projection
layout, MLP per layer): `HybridFamily`. Parameter names follow transformers 5.24
(``Qwen3_5ForCausalLM``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from radixflow.models.batch import ForwardBatch
from radixflow.models.families import layer_patterns, schemas
from radixflow.models.layers import Config, GatedMLP, RMSNorm, lm_head, run_layers
from radixflow.models.mixers.gated_attention import GatedAttention
from radixflow.models.mixers.gated_deltanet import GatedDeltaNet, Qwen35GatedDeltaNet
from radixflow.models.presets.qwen3_5 import PRESETS as PRESETS  # the zoo reads them here


def layer_types(config: Config) -> list[str]:
    """Per-layer mixer kind: explicit ``layer_types``, else every ``interval``-th layer is full
    (decoded where the schema's checks decode it)."""
    return layer_patterns.hybrid_kinds(config.to_dict())


# --------------------------------------------------------------------------- model


def dense_mlp(config: Config, idx: int) -> nn.Module:
    """The dense SwiGLU MLP (every Qwen3.5 layer; Qwen3-Next's non-MoE layers)."""
    return GatedMLP(config.hidden_size, config.intermediate_size, act=config.get("hidden_act", "silu"))


@dataclass(frozen=True)
class HybridFamily:
    """What differs between the hybrids: the DeltaNet projection layout and the MLP per layer."""

    deltanet: type[GatedDeltaNet]
    mlp: Callable[[Config, int], nn.Module]  # (config, layer index) -> MLP module


class DecoderLayer(nn.Module):
    """Pre-norm residual block: (DeltaNet | gated attention) then (dense MLP | sparse MoE)."""

    def __init__(self, config: Config, idx: int, kind: str, family: HybridFamily) -> None:
        super().__init__()
        eps = config.get("rms_norm_eps", 1e-6)
        hidden = config.hidden_size
        self.is_linear = kind == "linear_attention"
        if self.is_linear:
            self.linear_attn = family.deltanet(config, idx)
        else:
            self.self_attn = GatedAttention(config, idx)
        self.mlp = family.mlp(config, idx)
        self.input_layernorm = RMSNorm(hidden, eps, offset=1.0, cast_first=False)
        self.post_attention_layernorm = RMSNorm(hidden, eps, offset=1.0, cast_first=False)

    def forward(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        mixer = self.linear_attn if self.is_linear else self.self_attn
        h = h + mixer(self.input_layernorm(h), batch)
        return h + self.mlp(self.post_attention_layernorm(h))


class HybridModel(nn.Module):
    """The ``model.*`` submodule: embeddings, decoder layers, final norm."""

    def __init__(self, config: Config, family: HybridFamily) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        kinds = layer_types(config)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i, kind, family) for i, kind in enumerate(kinds[: config.num_hidden_layers])
        )
        self.norm = RMSNorm(
            config.hidden_size, config.get("rms_norm_eps", 1e-6), offset=1.0, cast_first=False
        )


class HybridForCausalLM(nn.Module):
    """CausalLM protocol over the shared hybrid stack; subclasses set ``family``."""

    family: HybridFamily

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.model = HybridModel(config, self.family)
        self.lm_head = lm_head(config, self.model.embed_tokens, config.get("tie_word_embeddings", False))

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.self_attn.num_kv_heads, layer.self_attn.head_dim)
            for i, layer in enumerate(self.model.layers)
            if not layer.is_linear
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {
            i: layer.linear_attn.state_shapes()
            for i, layer in enumerate(self.model.layers)
            if layer.is_linear
        }

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return run_layers(self.model.embed_tokens(batch.input_ids), self.model.layers, self.model.norm, batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


class Qwen35ForCausalLM(HybridForCausalLM):
    """``model_type: qwen3_5_text`` (transformers ``Qwen3_5ForCausalLM``), dense MLP."""

    family = HybridFamily(Qwen35GatedDeltaNet, dense_mlp)
    config_schema = schemas.QWEN3_5
    config_defaults = schemas.QWEN3_5_DEFAULTS


# --------------------------------------------------------------------------- init and presets


def _init_tensor(name: str, p: torch.Tensor, gen: torch.Generator, hidden: int) -> torch.Tensor:
    """Deterministic value for one parameter, chosen by its Hugging Face name."""
    shape = p.shape

    def randn(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    def uniform(lo: float, hi: float) -> torch.Tensor:
        return torch.rand(shape, generator=gen) * (hi - lo) + lo

    if name.endswith("A_log"):  # decay rates A in [0.05, 4] (log-uniform): short and long memories
        return uniform(math.log(0.05), math.log(4.0))
    if name.endswith("dt_bias"):  # inverse softplus of dt in [1e-3, 0.1], as Mamba does
        dt = uniform(math.log(1e-3), math.log(0.1)).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if name.endswith("conv1d.weight"):
        return randn(shape[-1] ** -0.5)
    if name.endswith("linear_attn.norm.weight"):  # plain-weight gated norm, centred on 1
        return 1.0 + randn(0.1)
    if "norm" in name:  # zero-centred (1 + w) norms
        return randn(0.1)
    if name.endswith("embed_tokens.weight"):
        return randn(1.0)
    if name.startswith("lm_head"):  # logit std ~4 over the unit-rms final hidden: peaked outputs
        return randn(4.0 / math.sqrt(hidden))
    if name.endswith("bias"):
        return randn(0.02)
    return randn(shape[-1] ** -0.5)  # Linear-like [.., out, in]: variance-preserving


def init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Fill every parameter of a Qwen3.5 / Qwen3-Next model deterministically from ``generator``.

    Tied embeddings get the lm_head scale (the shared tensor is both), so logits stay peaked.
    """
    hidden = model.config.hidden_size
    tied = model.config.get("tie_word_embeddings", False)
    with torch.no_grad():
        for name, p in model.named_parameters():
            key = "lm_head.weight" if tied and name == "model.embed_tokens.weight" else name
            p.copy_(_init_tensor(key, p, generator, hidden).to(p.dtype))
