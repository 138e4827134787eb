"""`hf_config` readers against what transformers' config classes fill in."""

from __future__ import annotations

from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.costmodel.shape.mixer_shapes import Mamba2

FALCON_WITHOUT_D_SSM = {
    "model_type": "falcon_h1",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "mamba_n_heads": 8,
    "vocab_size": 1000,
}


def test_a_falcon_h1_config_without_mamba_d_ssm_has_transformers_default_inner_width():
    # transformers' FalconH1Config: mamba_d_ssm defaults to 1024; only an explicit null falls
    # back to mamba_expand x hidden_size (here 512)
    shape = shape_from_config("falcon", FALCON_WITHOUT_D_SSM)
    mamba = next(m for m in shape.layers[0].mixers if isinstance(m, Mamba2))
    assert (mamba.heads, mamba.d_inner) == (8, 1024)
    null = shape_from_config("falcon", {**FALCON_WITHOUT_D_SSM, "mamba_d_ssm": None})
    assert next(m for m in null.layers[0].mixers if isinstance(m, Mamba2)).d_inner == 512
