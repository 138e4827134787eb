"""Zoo support shared by the Mamba2 hybrids (Nemotron-H, Falcon-H1): the deterministic weight init
(the fields every preset config starts from are in `radixflow.models.presets.mamba2`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from radixflow.models.layers import Config
from radixflow.models.mixers.mamba2 import as_float

_OUTPUT_PROJECTIONS = ("o_proj.weight", "out_proj.weight", "down_proj.weight", "fc2_latent_proj.weight")


def init_weights(model: nn.Module, generator: torch.Generator, logit_std: float = 4.0) -> None:
    """Deterministic init for either family, with peaked next-token distributions.

    Embeddings get std 1 and linear layers std ``1/sqrt(fan_in)`` (output projections halved) so
    every sublayer adds O(1) to the residual stream and recurrent/attention paths visibly shape
    the logits. The lm_head gets std ``logit_std / sqrt(hidden)`` (divided by Falcon's
    lm_head_multiplier), so logits have std ~``logit_std`` and top-1 margins are O(1). Mamba2
    parameters follow the published init: ``A = 1..16`` (log-spaced), ``dt = softplus(dt_bias)``
    log-uniform in [time_step_min, time_step_max] as drawn from the generator, ``D`` near 1.
    Norm weights are ``1 + N(0, 0.1)`` so a missed weight multiply shows up in the comparison.
    """
    config: Config = model.config  # type: ignore[assignment]
    hidden = config.hidden_size
    lm_std = logit_std / math.sqrt(hidden) / float(config.get("lm_head_multiplier", 1.0))
    dt_lo = as_float(config.get("time_step_min", 0.001))
    dt_hi = as_float(config.get("time_step_max", 0.1))
    with torch.no_grad():
        for name, p in model.named_parameters():  # tied aliases are visited once
            value = _init_value(name, p.shape, generator, lm_std, (dt_lo, dt_hi))
            p.copy_(value.to(p.dtype))


def _init_value(
    name: str, shape: torch.Size, generator: torch.Generator, lm_std: float, dt_range: tuple[float, float]
) -> torch.Tensor:
    """Deterministic value for one parameter, chosen by its checkpoint name."""

    def randn(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=generator) * std

    def rand() -> torch.Tensor:
        return torch.rand(shape, generator=generator)

    if name == "lm_head.weight":
        return randn(lm_std)
    if name.endswith(("embeddings.weight", "embed_tokens.weight")):
        return randn(1.0)
    if name.endswith("A_log"):
        return torch.log(1.0 + 15.0 * rand())
    if name.endswith("dt_bias"):
        dt_lo, dt_hi = dt_range
        dt = torch.exp(math.log(dt_lo) + rand() * (math.log(dt_hi) - math.log(dt_lo)))
        return dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    if name.endswith(".D"):
        return 0.5 + rand()
    if name.endswith("conv1d.weight"):
        return randn(1.0 / math.sqrt(shape[-1]))
    if name.endswith("e_score_correction_bias"):
        return randn(0.05)
    if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
        return 1.0 + randn(0.1)
    if name.endswith(".bias"):
        return randn(0.02)
    std = 1.0 / math.sqrt(shape[-1])
    if name.endswith(_OUTPUT_PROJECTIONS):
        std *= 0.5
    return randn(std)
