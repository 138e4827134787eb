"""Nemotron-H (``model_type`` "nemotron_h"): a Mamba2 hybrid (Hugging Face layout, transformers 5.24).

A stack of blocks ``x + mixer(norm(x))`` whose mixer is Mamba2 ("M"), attention without rotary
("*"), a relu2 MLP ("-") or a routed MoE with a shared expert ("E"). Checkpoints (NVIDIA's, and
what transformers' ``save_pretrained`` writes) name the body ``backbone.*`` and store experts one
module each (``experts.{j}.up_proj.weight``); transformers renames these at load time, so this
module uses the on-disk names directly. transformers never ties its embeddings, whatever the
config says. The Mamba2 mixer is `radixflow.models.mixers.mamba2`; the MLP and MoE blocks are
`radixflow.models.families.nemotron_h_moe`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from radixflow.models.attention import paged_attention
from radixflow.models.batch import ForwardBatch
from radixflow.models.families import layer_patterns, schemas
from radixflow.models.families.mamba2_init import init_weights as init_weights  # the zoo's entry point
from radixflow.models.families.nemotron_h_moe import NemotronHMLP, NemotronHMoE
from radixflow.models.layers import Config, RMSNorm, attention_heads
from radixflow.models.mixers.mamba2 import Mamba2Mixer, Mamba2Spec, as_float, first_of
from radixflow.models.presets.nemotron_h import PRESETS


def nemotron_layer_types(config: Config) -> list[str]:
    """Per-layer kinds: "linear_attention" (Mamba2), "full_attention", "mlp" or "moe"."""
    return layer_patterns.nemotron_kinds(config.to_dict())


def nemotron_mamba_spec(config: Config) -> Mamba2Spec:
    heads, head_dim = config.mamba_num_heads, config.mamba_head_dim
    fields = layer_patterns.NEMOTRON_FIELDS  # the older spelling wins, as in transformers
    groups = first_of(config, fields["groups"], layer_patterns.NEMOTRON_GROUPS)
    return Mamba2Spec(
        hidden=config.hidden_size,
        heads=heads,
        head_dim=head_dim,
        d_state=config.get("ssm_state_size", 128),
        groups=groups,
        d_conv=first_of(config, fields["conv_kernel"], 4),
        conv_bias=bool(first_of(config, fields["conv_bias"], True)),
        in_bias=bool(config.get("use_bias", False)),
        out_bias=bool(config.get("use_bias", False)),
        act=config.get("mamba_hidden_act", "silu"),
        # transformers' Nemotron-H mixer clamps dt from below at time_step_min (no upper limit)
        # and ignores time_step_limit.
        dt_min=as_float(first_of(config, fields["dt_min"], 0.001)),
        dt_max=float("inf"),
        norm="nemotron",
        norm_groups=groups,
        norm_before_gate=False,
        eps=config.get("layer_norm_epsilon", 1e-5),
    )


class NemotronHAttention(nn.Module):
    """GQA attention without positional encoding (position comes from the Mamba2 layers)."""

    def __init__(self, config: Config, layer_idx: int) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads, self.head_dim = attention_heads(config)
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_proj(x).view(t, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(t, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        out = paged_attention(self.layer_idx, q, k, v, batch, self.head_dim**-0.5)
        return self.o_proj(out.reshape(t, -1))


class NemotronHBlock(nn.Module):
    """``x + mixer(norm(x))`` with one mixer kind per block."""

    def __init__(self, config: Config, layer_idx: int, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.norm = RMSNorm(config.hidden_size, config.get("layer_norm_epsilon", 1e-5), cast_first=False)
        if kind == "linear_attention":
            self.mixer: nn.Module = Mamba2Mixer(nemotron_mamba_spec(config), layer_idx)
        elif kind == "full_attention":
            self.mixer = NemotronHAttention(config, layer_idx)
        elif kind == "mlp":
            self.mixer = NemotronHMLP(
                config.hidden_size,
                config.intermediate_size,
                bias=bool(config.get("mlp_bias", False)),
                act=config.get("mlp_hidden_act", "relu2"),
            )
        elif kind == "moe":
            self.mixer = NemotronHMoE(config)
        else:
            raise ValueError(f"unknown nemotron_h layer kind {kind!r}")

    def forward(self, x: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        return x + self.mix(self.norm(x), batch)

    def mix(self, h: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """The mixer's output for the normed input ``h`` (what the block adds to its input)."""
        if self.kind in ("linear_attention", "full_attention"):
            return self.mixer(h, batch)
        return self.mixer(h)


class NemotronHBackbone(nn.Module):
    """``backbone.*`` of the checkpoint."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            NemotronHBlock(config, i, kind) for i, kind in enumerate(nemotron_layer_types(config))
        )
        self.norm_f = RMSNorm(config.hidden_size, config.get("layer_norm_epsilon", 1e-5), cast_first=False)

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """The blocks in turn, each block's residual add fused with the norm after it (the next
        block's, the last one's with ``norm_f``): one kernel call where there were two, written
        into the running sum and the block's output (both this loop's own: the embedding's
        output, then sums; every mixer returns a new tensor), no new tensors."""
        x = self.embeddings(batch.input_ids)
        blocks: list[NemotronHBlock] = list(self.layers)  # type: ignore[arg-type]
        if not blocks:
            return self.norm_f(x)
        h = blocks[0].norm(x)
        norms = [b.norm for b in blocks[1:]] + [self.norm_f]
        for block, norm in zip(blocks, norms, strict=True):
            x, h = norm.residual_(x, block.mix(h, batch))
        return h


class NemotronHForCausalLM(nn.Module):
    """Nemotron-H: a pattern of Mamba2, attention, MLP and MoE blocks."""

    PRESETS: dict[str, dict[str, Any]]  # set below
    config_schema = schemas.NEMOTRON_H
    config_defaults = schemas.NEMOTRON_H_DEFAULTS

    def __init__(self, config: Config) -> None:
        super().__init__()
        # Multi-token-prediction heads (mtp.*), if any, are extra tensors the loader skips.
        self.config = config
        self.backbone = NemotronHBackbone(config)
        # No tying: transformers' NemotronHForCausalLM keeps lm_head separate even when the
        # config says tie_word_embeddings.
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def kv_layout(self) -> dict[int, tuple[int, int]]:
        return {
            i: (layer.mixer.num_kv_heads, layer.mixer.head_dim)
            for i, layer in enumerate(self.backbone.layers)
            if layer.kind == "full_attention"
        }

    def state_layout(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        return {
            i: layer.mixer.state_shapes()
            for i, layer in enumerate(self.backbone.layers)
            if layer.kind == "linear_attention"
        }

    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        return self.backbone(batch)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


# ---------------------------------------------------------------------------------------------
# Presets (radixflow.models.presets.nemotron_h), also on the class


NemotronHForCausalLM.PRESETS = PRESETS
