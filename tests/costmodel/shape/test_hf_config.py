"""`hf_config` readers against what transformers' config classes fill in."""

from __future__ import annotations

import pytest

from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.costmodel.shape.limits import DEFAULT_CONTEXT, MAX_WIDTH, shape_problem
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


LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "vocab_size": 100,
}
QWEN3_NEXT = {
    **LLAMA,
    "model_type": "qwen3_next",
    "num_hidden_layers": 4,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}
QWEN3_5 = {k: v for k, v in QWEN3_NEXT.items() if not k.startswith("num_experts")}


# A size the readers divide by was a ZeroDivisionError, "integer division or modulo by zero",
# naming no key (`radixflow cost` on such a checkpoint said only that)
@pytest.mark.parametrize(
    ("config", "key"),
    [
        (LLAMA, "num_attention_heads"),
        ({**LLAMA, "model_type": "lfm2"}, "num_attention_heads"),
        ({**LLAMA, "model_type": "lfm2"}, "block_multiple_of"),
        ({**QWEN3_5, "model_type": "qwen3_5_text"}, "full_attention_interval"),
        (QWEN3_NEXT, "decoder_sparse_step"),
        ({**FALCON_WITHOUT_D_SSM, "num_attention_heads": 0}, "num_attention_heads"),
        (FALCON_WITHOUT_D_SSM, "mamba_n_heads"),
    ],
)
def test_a_zero_size_the_readers_divide_by_names_its_key(config, key):
    with pytest.raises(ValueError, match=rf"^{key} must be at least 1, got 0$"):
        shape_from_config("m", {**config, key: 0})


# A 0 read as an absent key: num_key_value_heads 0 was costed as one KV head per query head,
# head_dim 0 as hidden / heads and mamba_d_ssm 0 as mamba_expand x hidden, a model the torch
# runner (and transformers) would never build from that config
@pytest.mark.parametrize(
    ("key", "words"), [("num_key_value_heads", "kv_heads 0"), ("head_dim", "head_dim 0")]
)
def test_a_zero_attention_size_is_refused_not_read_as_absent(key, words):
    problem = shape_problem(shape_from_config("m", {**LLAMA, key: 0}))
    assert problem == f"gives layer 0's attention {words} (must be 1 to {MAX_WIDTH})"


def test_a_zero_mamba_d_ssm_is_refused_not_read_as_absent():
    with pytest.raises(ValueError, match=r"^mamba_d_ssm must be at least 1, got 0$"):
        shape_from_config("m", {**FALCON_WITHOUT_D_SSM, "mamba_d_ssm": 0})


# A multiplier given as a string multiplied a string: LFM2's block_ffn_dim_multiplier "2" made
# an intermediate width of 2 into "22" (a 256-wide MLP, costed without a word), and Falcon-H1's
# mamba_expand "2" an inner width of "2" x hidden_size digits
@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({**LLAMA, "model_type": "lfm2", "intermediate_size": 3}, "block_ffn_dim_multiplier"),
        ({**FALCON_WITHOUT_D_SSM, "mamba_d_ssm": None}, "mamba_expand"),
    ],
)
def test_a_multiplier_given_as_a_string_is_refused_naming_it(config, key):
    with pytest.raises(ValueError, match=rf"^{key} must be a number, got '2'$"):
        shape_from_config("m", {**config, key: "2"})


# Falcon-H1's SSM heads that do not fill its inner width were costed as heads x head dim
# (3040 of 3072 wide, or 1536), a model transformers' FalconH1Config and the torch runner refuse
@pytest.mark.parametrize(
    ("edits", "words"),
    [
        ({"mamba_n_heads": 40}, "mamba_n_heads must divide the SSM's inner size mamba_d_ssm (3072), got 40"),
        (
            {"mamba_n_heads": 48, "mamba_d_head": 32},
            "mamba_d_head 32 x mamba_n_heads 48 is 1536, not the SSM's inner size mamba_d_ssm (3072)",
        ),
        (
            {"mamba_d_ssm": None, "mamba_n_heads": 48, "mamba_d_head": 32},
            "mamba_d_head 32 x mamba_n_heads 48 is 1536, not the SSM's inner size mamba_expand x "
            "hidden_size (512)",
        ),
    ],
)
def test_falcon_h1_ssm_heads_that_do_not_fill_its_inner_width_are_refused(edits, words):
    with pytest.raises(ValueError) as info:
        shape_from_config("m", {**FALCON_WITHOUT_D_SSM, "mamba_d_ssm": 3072, **edits})
    assert str(info.value) == words


NEMOTRON_H = {
    **LLAMA,
    "model_type": "nemotron_h",
    "hybrid_override_pattern": "M*",
    "mamba_num_heads": 4,
    "mamba_head_dim": 16,
}


# A per-layer list given as a number or a string failed as "'int' object is not iterable",
# "argument of type 'float' is not iterable" or "'in <string>' requires string as left operand",
# naming no key (a string of layer kinds was read as one kind per character)
@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        (QWEN3_NEXT, "layer_types", 5),
        (QWEN3_NEXT, "layer_types", "linear_attention"),
        (QWEN3_NEXT, "mlp_only_layers", 1.5),
        (QWEN3_NEXT, "mlp_only_layers", "1"),
        ({**LLAMA, "model_type": "lfm2"}, "full_attn_idxs", 5),
        ({**LLAMA, "model_type": "lfm2"}, "layer_types", 5),
        (NEMOTRON_H, "layers_block_type", 5),
    ],
)
def test_a_per_layer_list_given_as_no_list_is_refused_naming_it(config, key, value):
    with pytest.raises(ValueError) as info:
        shape_from_config("m", {**config, key: value})
    assert str(info.value) == f"{key} must be a list, got {value!r}"


# A size that is no integer failed as int()'s own words, "invalid literal for int() with base
# 10: 'abc'" or "int() argument must be a string, a bytes-like object or a real number, not
# 'list'", naming no key; a true was read as 1
@pytest.mark.parametrize(
    ("config", "key", "value"),
    [
        (LLAMA, "hidden_size", "abc"),
        (LLAMA, "intermediate_size", [1]),
        (LLAMA, "head_dim", "auto"),
        (LLAMA, "num_hidden_layers", True),
        (QWEN3_NEXT, "linear_key_head_dim", {}),
        (QWEN3_NEXT, "num_experts", "many"),
        (FALCON_WITHOUT_D_SSM, "mamba_d_state", "x"),
        (NEMOTRON_H, "n_groups", [8]),
        (LLAMA, "max_position_embeddings", "abc"),
        (LLAMA, "max_position_embeddings", [4096]),
    ],
)
def test_a_size_that_is_no_integer_is_refused_naming_it(config, key, value):
    with pytest.raises(ValueError) as info:
        shape_from_config("m", {**config, key: value})
    assert str(info.value) == f"{key} must be an integer, got {value!r}"


def test_a_long_value_is_shown_cut_short():
    with pytest.raises(ValueError) as info:
        shape_from_config("m", {**LLAMA, "hidden_size": "9" * 5000})
    assert str(info.value) == f"hidden_size must be an integer, got '{'9' * 56}..."


@pytest.mark.parametrize("context", [{}, {"max_position_embeddings": None}])
def test_a_config_naming_no_context_is_read_with_the_torch_runners_default(context):
    """The reader assumed 262144 where the torch runner serves such a checkpoint with
    `DEFAULT_CONTEXT`: the round predictor, calibration and costcheck read the checkpoint's shape
    with a context the model does not have (the sim's own reading overrode it)."""
    assert shape_from_config("llama", {**LLAMA, **context}).max_context == DEFAULT_CONTEXT
    assert shape_from_config("llama", {**LLAMA, "max_position_embeddings": 8192}).max_context == 8192
