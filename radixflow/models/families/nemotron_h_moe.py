"""Nemotron-H feed-forward blocks: the relu2 MLP ("-" layers) and the routed MoE ("E" layers).

The MoE routes each token to ``num_experts_per_tok`` of ``n_routed_experts`` relu2 experts with a
sigmoid router (score-correction bias, group-limited selection), optionally in a latent space,
and adds one always-on shared expert. Experts are stored one module each, as on disk
(``experts.{j}.up_proj.weight``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixflow.models.families.layer_patterns import (
    NEMOTRON_FIELDS,
    NEMOTRON_ROUTER_GROUPS,
    NEMOTRON_TOPK_GROUPS,
)
from radixflow.models.layers import ACTIVATIONS_IN_PLACE, Config, RunByKernels
from radixflow.models.mixers.mamba2 import first_of


def experts(config: Config) -> int:
    """The routed experts: ``num_local_experts`` (transformers' attribute_map name, which it sets
    ``n_routed_experts`` from) or ``n_routed_experts``."""
    return int(first_of(config, NEMOTRON_FIELDS["experts"]))


class NemotronHMLP(RunByKernels):
    """Non-gated MLP: ``down(act(up(x)))`` (relu2 in the released models, run by the kernels:
    one native pass where eager torch makes two)."""

    def __init__(self, hidden: int, intermediate: int, bias: bool, act: str) -> None:
        super().__init__()
        self.up_proj = nn.Linear(hidden, intermediate, bias=bias)
        self.down_proj = nn.Linear(intermediate, hidden, bias=bias)
        self.act = ACTIVATIONS_IN_PLACE[act]
        self.relu2 = act == "relu2"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        up = self.up_proj(x)  # the activation is written into up_proj's own output
        return self.down_proj(self.kernels.relu2_(up) if self.relu2 else self.act(up))


class NemotronHRouter(nn.Module):
    """Sigmoid top-k router with a score-correction bias and group-limited selection.

    Both tensors are parameters (not buffers) so `save_model` writes the bias, as checkpoints do.
    """

    def __init__(self, config: Config) -> None:
        super().__init__()
        self.num_experts = experts(config)
        self.top_k = config.num_experts_per_tok
        self.n_group = config.get("n_group", NEMOTRON_ROUTER_GROUPS)
        self.topk_group = config.get("topk_group", NEMOTRON_TOPK_GROUPS)
        self.norm_topk_prob = bool(config.get("norm_topk_prob", True))
        self.scaling = float(config.get("routed_scaling_factor", 1.0))
        self.weight = nn.Parameter(torch.zeros(self.num_experts, config.hidden_size))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(self.num_experts), requires_grad=False)

    def _apply(self, fn, recurse: bool = True):  # type: ignore[override]
        """Follow device moves but stay float32 (as transformers keeps ``gate.*`` in fp32):
        expert selection in bf16 would flip near-tied choices."""
        originals = {name: p.data for name, p in self.named_parameters(recurse=False)}
        super()._apply(fn, recurse)
        for name, p in self.named_parameters(recurse=False):
            if p.dtype != originals[name].dtype:
                p.data = originals[name].to(device=p.device)
        return self

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [T, hidden]`` -> (expert ids ``[T, k]``, float32 weights ``[T, k]``)."""
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        choice = scores + self.e_score_correction_bias.float()
        per_group = self.num_experts // self.n_group
        grouped = choice.view(-1, self.n_group, per_group)
        group_scores = grouped.topk(min(2, per_group), dim=-1).values.sum(-1)
        keep = torch.zeros_like(group_scores)
        keep.scatter_(1, group_scores.topk(self.topk_group, dim=-1).indices, 1.0)
        mask = keep.bool().unsqueeze(-1).expand_as(grouped).reshape(-1, self.num_experts)
        ids = choice.masked_fill(~mask, float("-inf")).topk(self.top_k, dim=-1).indices
        weights = scores.gather(1, ids)
        if self.norm_topk_prob:
            weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
        return ids, weights * self.scaling


class NemotronHMoE(nn.Module):
    """Routed relu2 experts (optionally in a latent space) plus one always-on shared expert."""

    def __init__(self, config: Config) -> None:
        super().__init__()
        hidden = config.hidden_size
        latent = config.get("moe_latent_size")
        bias = bool(config.get("mlp_bias", False))
        act = config.get("mlp_hidden_act", "relu2")
        inner = latent or hidden
        self.experts = nn.ModuleList(
            NemotronHMLP(inner, config.moe_intermediate_size, bias=False, act=act)
            for _ in range(experts(config))
        )
        self.gate = NemotronHRouter(config)
        self.shared_experts = NemotronHMLP(
            hidden, config.moe_shared_expert_intermediate_size, bias=bias, act=act
        )
        if latent:
            self.fc1_latent_proj = nn.Linear(hidden, latent, bias=bias)
            self.fc2_latent_proj = nn.Linear(latent, hidden, bias=bias)
        else:
            self.fc1_latent_proj = self.fc2_latent_proj = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ids, weights = self.gate(x)
        h = self.fc1_latent_proj(x) if self.fc1_latent_proj is not None else x
        out = torch.zeros(h.shape, dtype=torch.float32, device=h.device)
        for e in ids.unique().tolist():
            tok, pos = torch.where(ids == e)
            y = self.experts[e](h[tok]) * weights[tok, pos, None]
            out.index_add_(0, tok, y.float())
        out = out.to(x.dtype)
        if self.fc2_latent_proj is not None:
            out = self.fc2_latent_proj(out)
        return out + self.shared_experts(x)
