"""The sim's model shapes against the public configs they are named after."""

from __future__ import annotations

import pytest

from radixflow.costmodel.shape.mixer_shapes import Mamba2
from radixflow.costmodel.shape.sim_catalogue import PUBLIC_CONFIGS, SIM_MODELS


def _mamba(name: str) -> Mamba2:
    return next(m for layer in SIM_MODELS[name].layers for m in layer.mixers if isinstance(m, Mamba2))


def test_falcon_h1_1_5b_mamba_heads_are_the_checkpoints():
    # tiiuae/Falcon-H1-1.5B: 48 Mamba2 heads of 64 channels (d_ssm 3072), d_state 256, one group
    # (the transformers FalconH1 docs' model table: "Mamba Heads 48, d_head 128 / 64"; the
    # checkpoint's config.json: mamba_n_heads 48, mamba_d_head 64, mamba_d_ssm 3072)
    mamba = _mamba("falcon_h1-1.5b")
    assert (mamba.heads, mamba.head_dim, mamba.d_state, mamba.groups) == (48, 64, 256, 1)


def test_qwen3_next_dense_width_is_the_checkpoints_not_the_transformers_default():
    # Qwen/Qwen3-Next-80B-A3B-Instruct's config.json: intermediate_size 5120 (THUDM/slime's
    # scripts/models/qwen3-next-80B-A3B.sh: --ffn-hidden-size 5120); 5632 is only transformers'
    # Qwen3NextConfig default. Every layer is MoE there, so no layer reads it.
    config, _source = PUBLIC_CONFIGS["qwen3_next-80b-a3b"]
    assert config["intermediate_size"] == 5120
    layers = SIM_MODELS["qwen3_next-80b-a3b"].layers
    assert all(layer.mlp is not None and layer.mlp.experts == 512 for layer in layers)


def test_qwen3_5_2b_names_transformers_config_only_for_the_widths_it_holds():
    # the source said the DeltaNet and MLP widths were transformers 5.24 Qwen3_5TextConfig's; that
    # config has 32 value heads and a 12288-wide MLP (at width 4096), the shape 16 and 6144
    transformers = pytest.importorskip("transformers")
    default = transformers.Qwen3_5TextConfig().to_dict()
    config, source = PUBLIC_CONFIGS["qwen3_5-2b"]
    taken = ("linear_num_key_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim")
    assert all(config[k] == default[k] for k in taken)
    for key, said in (("linear_num_value_heads", "{} value heads"), ("intermediate_size", "a {}-wide MLP")):
        assert config[key] != default[key]
        assert said.format(config[key]) in source and said.format(default[key]) in source, source
    assert "assumed" in source


@pytest.mark.parametrize(
    ("name", "config_class"),
    [("qwen3_5-35b-a3b", "Qwen3_5MoeTextConfig"), ("qwen3_next-80b-a3b", "Qwen3NextConfig")],
)
def test_a_shape_sourced_as_transformers_defaults_names_every_field_it_does_not_take_from_them(
    name, config_class
):
    # both sources said the shape was transformers 5.24's config defaults; their context,
    # max_position_embeddings 262144, is not (the default is 32768), and neither said so
    transformers = pytest.importorskip("transformers")
    default = getattr(transformers, config_class)().to_dict()
    config, source = PUBLIC_CONFIGS[name]
    assert f"{config_class} defaults" in source
    for key in (k for k, v in config.items() if k != "model_type" and default.get(k) != v):
        assert key in source and str(default[key]) in source, (key, source)
