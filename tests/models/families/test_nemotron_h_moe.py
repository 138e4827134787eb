"""Nemotron-H's feed-forward blocks (`models.families.nemotron_h_moe`)."""

from __future__ import annotations

import torch

from radixflow.models.families.mamba2_init import init_weights
from radixflow.models.families.nemotron_h import PRESETS, NemotronHForCausalLM
from radixflow.models.families.nemotron_h_moe import NemotronHMLP
from radixflow.models.kernels.torch_kernels import TORCH_KERNELS
from radixflow.models.layers import Config, use_kernels


def test_the_relu2_mlp_runs_its_activation_by_the_models_kernels_to_the_bit(kernels) -> None:
    model = NemotronHForCausalLM(Config(PRESETS["tiny"]))
    init_weights(model, torch.Generator().manual_seed(0))
    use_kernels(model, kernels)
    mlps = [m for m in model.modules() if isinstance(m, NemotronHMLP)]
    assert mlps and all(m.kernels is kernels and m.relu2 for m in mlps)
    x = torch.randn(5, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    mlp = mlps[0]
    with torch.inference_mode():
        want = mlp.down_proj(torch.relu(mlp.up_proj(x)).square())
        assert torch.equal(mlp(x), want)


def test_an_mlp_of_another_activation_keeps_it(kernels) -> None:
    mlp = NemotronHMLP(8, 16, bias=False, act="relu")
    mlp.kernels = kernels
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        assert not mlp.relu2 and torch.equal(mlp(x), mlp.down_proj(torch.relu(mlp.up_proj(x))))
    assert NemotronHMLP(8, 16, bias=False, act="relu2").kernels is TORCH_KERNELS  # until use_kernels
