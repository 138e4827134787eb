"""Qwen3-Next (``model_type`` "qwen3_next"): the Qwen3.5 hybrid stack (`radixflow.models.families.qwen3_5`)
with fused DeltaNet projections and a sparse MoE MLP (top-k softmax router, routed experts stored
as 3-D tensors, sigmoid-gated shared expert). Parameter names follow transformers 5.24
(``Qwen3NextForCausalLM``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.families import layer_patterns, schemas
from radixflow.models.families.qwen3_5 import HybridFamily, HybridForCausalLM, dense_mlp
from radixflow.models.families.qwen3_5 import init_weights as init_weights  # the zoo's entry point
from radixflow.models.layers import ACTIVATIONS, Config, GatedMLP
from radixflow.models.mixers.gated_deltanet import Qwen3NextGatedDeltaNet
from radixflow.models.presets.qwen3_next import PRESETS as PRESETS  # the zoo reads them here

# --------------------------------------------------------------------------- sparse MoE


class Experts(nn.Module):
    """Routed experts stored as 3-D tensors (``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``)."""

    def __init__(self, num_experts: int, hidden: int, intermediate: int, act: str) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.zeros(num_experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.zeros(num_experts, hidden, intermediate))
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor, index: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Tokens sorted by expert, one matmul pair per expert that received tokens."""
        top_k = index.shape[1]
        flat = index.reshape(-1)
        order = torch.argsort(flat, stable=True)
        token = order // top_k
        counts = torch.bincount(flat, minlength=self.gate_up_proj.shape[0]).tolist()
        xs = x[token]
        ys = torch.empty_like(xs)
        start = 0
        for e, n in enumerate(counts):
            if n:
                gate, up = F.linear(xs[start : start + n], self.gate_up_proj[e]).chunk(2, dim=-1)
                ys[start : start + n] = F.linear(self.act(gate) * up, self.down_proj[e])
                start += n
        ys = ys * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add_(0, token, ys)


class SparseMoeBlock(nn.Module):
    """Top-k softmax router over routed experts plus a sigmoid-gated shared expert."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden, act = config.hidden_size, config.get("hidden_act", "silu")
        self.top_k = config.num_experts_per_tok
        self.norm_topk = config.get("norm_topk_prob", True)
        self.gate = nn.Linear(hidden, config.num_experts, bias=False)
        self.experts = Experts(config.num_experts, hidden, config.moe_intermediate_size, act)
        self.shared_expert = GatedMLP(hidden, config.shared_expert_intermediate_size, act=act)
        self.shared_expert_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(-1, keepdim=True)
        routed = self.experts(x, index, weights.to(x.dtype))
        return routed + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)


def next_mlp(config: Config, idx: int) -> nn.Module:
    """Sparse MoE on the MoE layers, the dense MLP elsewhere."""
    if layer_patterns.next_moe_layer(config.to_dict(), idx):
        return SparseMoeBlock(config)
    return dense_mlp(config, idx)


# --------------------------------------------------------------------------- model and presets


class Qwen3NextForCausalLM(HybridForCausalLM):
    """``model_type: qwen3_next`` (transformers ``Qwen3NextForCausalLM``), sparse MoE MLP."""

    family = HybridFamily(Qwen3NextGatedDeltaNet, next_mlp)
    config_schema = schemas.QWEN3_NEXT
    config_defaults = schemas.QWEN3_NEXT_DEFAULTS
