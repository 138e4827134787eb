"""Every zoo family's cost-model shape against the torch model it stands for.

The sim costs a zoo name or checkpoint by its shape, the torch runner's round predictor fits its
rounds by it, and both size pools by its KV and state bytes: each figure here is counted from the
torch model's own modules and the runner's KV and state pools (all on the meta device: nothing
allocated), layer by layer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from radixflow.costmodel.shape.hf_config import shape_from_config
from radixflow.costmodel.shape.model_shape import ModelShape

torch = pytest.importorskip("torch")
zoo_catalogue = pytest.importorskip("radixflow.models.zoo_catalogue")
# after torch is known to be here
from model_utils import needs_smollm2  # noqa: E402

from radixflow.models.batch import StatePool  # noqa: E402
from radixflow.models.kv_pool import KVPool  # noqa: E402

PRESETS: list[Any] = [
    f"{family}-{size}" for family in zoo_catalogue.FAMILY_SOURCES for size in ("tiny", "small")
]
PRESETS.append(pytest.param("smollm2-135m", marks=needs_smollm2))  # the real weights' config


def build(config: dict[str, Any]) -> Any:
    """The torch model ``config`` describes, on the meta device, with the keys it leaves out that
    the loader fills in (`models.io.loader.read_config`)."""
    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class

    family = model_class(config["model_type"])
    with torch.device("meta"):
        return family(Config({**family.config_defaults, **config}))


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    if "layers" not in parts:
        return None
    return int(parts[parts.index("layers") + 1])


def torch_matmul_params(model: Any) -> dict[int, int]:
    """Per layer, the weights of its matrices: every parameter of two or more dimensions except
    the depthwise convolutions' taps (``[channels, 1, kernel]``), which the shape counts as mixing."""
    out: dict[int, int] = {}
    for name, p in model.named_parameters():
        i = _layer_index(name)
        depthwise = p.dim() == 3 and p.shape[1] == 1
        if i is not None and p.dim() >= 2 and not depthwise:
            out[i] = out.get(i, 0) + p.numel()
    return out


def shape_matmul_params(shape: ModelShape) -> dict[int, int]:
    out = {}
    for i, layer in enumerate(shape.layers):
        mlp = layer.mlp.total_params(shape.hidden) if layer.mlp is not None else 0
        out[i] = sum(m.params(shape.hidden) for m in layer.mixers) + mlp
    return out


def _row_bytes(tensors: list[Any]) -> int:
    """Bytes of one row (token slot or state slot) of each of ``tensors``."""
    return sum(t[0].numel() * t.element_size() for t in tensors)


def per_layer(shape: ModelShape, figure: Any) -> dict[int, int]:
    """``figure(mixer)`` summed over each layer's mixers."""
    return {i: sum(figure(m) for m in layer.mixers) for i, layer in enumerate(shape.layers)}


def assert_shape_is_the_model(shape: ModelShape, model: Any) -> None:
    assert shape_matmul_params(shape) == torch_matmul_params(model)
    n = len(shape.layers)
    kv_pool = KVPool(model.kv_layout(), 1, 1, torch.bfloat16, "meta")  # one token's slot
    kv = {i: _row_bytes([kv_pool.k[i], kv_pool.v[i]]) for i in kv_pool.k}
    assert per_layer(shape, lambda m: m.kv_bytes_per_token(2)) == {i: kv.get(i, 0) for i in range(n)}
    state_pool = StatePool(model.state_layout(), 1, torch.float32, "meta")  # as the runner keeps it
    state = {i: _row_bytes(list(tensors)) for i, tensors in state_pool.tensors.items()}
    assert per_layer(shape, lambda m: m.state_bytes()) == {i: state.get(i, 0) for i in range(n)}
    routed = {
        _layer_index(name): m.top_k
        for name, m in model.named_modules()
        if isinstance(getattr(m, "top_k", None), int)
    }
    assert {
        i: layer.mlp.top_k for i, layer in enumerate(shape.layers) if layer.mlp and layer.mlp.experts
    } == routed
    head = model.lm_head
    embed = next(m for m in model.modules() if isinstance(m, torch.nn.Embedding))
    assert shape.tied_embeddings == (head.weight is embed.weight)
    assert (shape.vocab_size, shape.hidden) == tuple(head.weight.shape)


@pytest.mark.parametrize("name", PRESETS)
def test_every_zoo_presets_shape_is_its_torch_model(name):
    config = zoo_catalogue.preset_config(name)
    assert_shape_is_the_model(shape_from_config(name, config), build(config))


def variant(name: str, drop: tuple[str, ...] = (), **edits: Any) -> dict[str, Any]:
    """Zoo preset ``name``'s config without the keys ``drop`` and with ``edits``."""
    config = {k: v for k, v in zoo_catalogue.preset_config(name).items() if k not in drop}
    return {**config, **edits}


def _renamed(name: str, renames: dict[str, str]) -> dict[str, Any]:
    config = zoo_catalogue.preset_config(name)
    return {renames.get(k, k): v for k, v in config.items()}


# configs the torch loader reads as the family does (its schema's aliases and defaults)
NEMOTRON_VARIANTS = {
    "older key names": _renamed(
        "nemotron_h-tiny", {"layers_block_type": "layer_types", "n_groups": "mamba_n_groups"}
    ),
    "older conv key": variant("nemotron_h-tiny", drop=("conv_kernel",), mamba_d_conv=2),
    "defaults": variant("nemotron_h-tiny", drop=("ssm_state_size", "n_groups", "conv_kernel")),
}


@pytest.mark.parametrize("config", NEMOTRON_VARIANTS.values(), ids=NEMOTRON_VARIANTS)
def test_a_nemotron_h_config_is_read_with_the_torch_families_names_and_defaults(config):
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_a_falcon_h1_config_is_read_with_the_torch_families_defaults():
    # 128 heads (each of d_ssm / 128 dims), a 256-wide state, 1 group
    config = variant(
        "falcon_h1-tiny", drop=("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups")
    )
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


LFM2_TIES = {
    "its own key decides": variant("lfm2-tiny", tie_embedding=False),  # tie_word_embeddings: true
    "tied by default": variant("lfm2-tiny", drop=("tie_word_embeddings",)),
}


@pytest.mark.parametrize("config", LFM2_TIES.values(), ids=LFM2_TIES)
def test_an_lfm2_config_ties_its_embeddings_as_the_torch_family_does(config):
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_a_nemotron_h_config_saying_tied_is_untied_as_the_torch_family_builds_it():
    config = variant("nemotron_h-tiny", tie_word_embeddings=True)  # transformers never ties it
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_an_lfm2_config_with_no_layer_pattern_is_all_attention_as_the_torch_family_builds_it():
    config = variant("lfm2-tiny", drop=("layer_types", "full_attn_idxs"))
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


NULLS = {  # a null reads as absent: the family's default
    "qwen3_next": variant("qwen3_next-tiny", linear_conv_kernel_dim=None, decoder_sparse_step=None),
    "qwen3_5": variant("qwen3_5-tiny", drop=("layer_types",), full_attention_interval=None),
    "lfm2": variant("lfm2-tiny", block_auto_adjust_ff_dim=None, block_multiple_of=None, conv_L_cache=None),
}


@pytest.mark.parametrize("config", NULLS.values(), ids=NULLS)
def test_a_null_in_a_config_is_read_as_the_torch_familys_default(config):
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_a_qwen3_next_config_leaving_out_its_moe_is_read_with_transformers_512_experts():
    """Qwen3NextConfig's MoE where config.json names none (every layer, 512 experts of 512, top
    10), as the torch loader fills it in: the shape read it as dense."""
    moe = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size")
    config = variant("qwen3_next-tiny", drop=moe)
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_a_dense_qwen3_5_config_with_qwen3_next_moe_fields_is_dense_as_the_torch_family_builds_it():
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    config = variant("qwen3_5-tiny", shared_expert_intermediate_size=32, **moe)
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


TRANSFORMERS_CONFIGS = ["LlamaConfig", "Qwen3Config", "Qwen3_5TextConfig", "Qwen3NextConfig", "Lfm2Config"]
TRANSFORMERS_CONFIGS += ["NemotronHConfig", "FalconH1Config"]


@pytest.mark.parametrize("cls", TRANSFORMERS_CONFIGS)
def test_a_config_as_transformers_writes_it_is_read_as_the_torch_family_builds_it(cls):
    """Every field at transformers' defaults (the released checkpoints' sizes, some of them)."""
    transformers = pytest.importorskip("transformers")
    config = getattr(transformers, cls)().to_dict()
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_a_qwen3_5_moe_shape_is_transformers_model_layer_by_layer():
    """The torch runner has no Qwen3.5-MoE family: transformers' model is the reference."""
    transformers = pytest.importorskip("transformers")
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
    gdn = {"linear_num_key_heads": 2, "linear_num_value_heads": 4}
    gdn |= {"linear_key_head_dim": 16, "linear_value_head_dim": 16}
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    text = {"hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 128, **heads, **gdn, **moe}
    config = transformers.Qwen3_5MoeConfig(text_config={**text, "shared_expert_intermediate_size": 32})
    with torch.device("meta"):
        model = transformers.Qwen3_5MoeForCausalLM(config.text_config)
    shape = shape_from_config("m", config.to_dict())
    assert shape_matmul_params(shape) == torch_matmul_params(model)


HEAD_DEFAULTS = [f"{family}-tiny" for family in zoo_catalogue.FAMILY_SOURCES]


@pytest.mark.parametrize("name", HEAD_DEFAULTS)
def test_a_config_leaving_out_kv_heads_and_head_dim_is_read_with_the_families_defaults(name):
    """transformers' config classes fill in their own (Qwen3.5: 4 KV heads of 256), and so does
    the torch loader: the shape took every query head as its own KV head of hidden / heads."""
    config = variant(name, drop=("num_key_value_heads", "head_dim"))
    if name.startswith("lfm2"):
        config["num_attention_heads"] = 16  # a multiple of the default 8 KV heads
    model = build(config)
    assert_shape_is_the_model(shape_from_config("m", config), model)


BOTH_SPELLINGS = {  # transformers' NemotronHConfig takes the older (or attribute_map) one
    "groups": variant("nemotron_h-tiny", n_groups=2, mamba_n_groups=4),
    "conv kernel": variant("nemotron_h-tiny", conv_kernel=4, mamba_d_conv=2),
    "experts": variant("nemotron_h-tiny", n_routed_experts=8, num_local_experts=4),
    "pattern": variant(
        "nemotron_h-tiny",
        layer_types=["linear_attention", "full_attention", "mlp"],
        num_hidden_layers=3,
    ),
}


@pytest.mark.parametrize("config", BOTH_SPELLINGS.values(), ids=BOTH_SPELLINGS)
def test_a_nemotron_h_field_in_both_spellings_is_read_by_the_one_the_torch_family_reads(config):
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


LFM2_WIDTHS = {
    "block_ff_dim decides": variant("lfm2-tiny", block_ff_dim=384),  # beside intermediate_size 192
    "rounded without a multiplier": variant(
        "lfm2-tiny", drop=("block_ffn_dim_multiplier",), block_multiple_of=96
    ),
}


@pytest.mark.parametrize("config", LFM2_WIDTHS.values(), ids=LFM2_WIDTHS)
def test_an_lfm2_feed_forward_width_is_read_as_the_torch_family_reads_it(config):
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


NEMOTRON_WITHOUT = {  # the loader asks for a kind's fields only where a layer of that kind is
    "no MLP block, no intermediate_size": variant(
        "nemotron_h-tiny",
        drop=("intermediate_size",),
        layers_block_type=["linear_attention", "full_attention", "moe", "linear_attention"],
        num_hidden_layers=4,
    ),
    "no Mamba2 block, no mamba widths": variant(
        "nemotron_h-tiny",
        drop=("mamba_num_heads", "mamba_head_dim"),
        layers_block_type=["full_attention", "mlp", "full_attention", "moe"],
        num_hidden_layers=4,
    ),
}


@pytest.mark.parametrize("config", NEMOTRON_WITHOUT.values(), ids=NEMOTRON_WITHOUT)
def test_a_nemotron_h_config_without_a_kinds_fields_and_no_layer_of_it_is_read(config, tmp_path):
    """The reader built every block kind's layer up front, so a Nemotron-H config without an MLP
    block and its width (the torch loader requires intermediate_size only where an "mlp" block is)
    was a KeyError: the sim refused it and the torch runner's round predictor could not start."""
    from radixflow.models.io.loader import read_config

    (tmp_path / "config.json").write_text(json.dumps(config))
    read_config(tmp_path)  # the torch loader's checks take it
    assert_shape_is_the_model(shape_from_config("m", config), build(config))


def test_the_shape_readers_defaults_are_the_loaders_family_by_family():
    """The sim's shape reader fills in what a config.json leaves out as the torch loader does (the
    cost model cannot import the models): two copies of one table, held equal here, or a config
    the loader reads one way the sim would price another (qwen3_next without num_experts)."""
    from radixflow.costmodel.shape.hf_config import DEFAULTS
    from radixflow.models.registry import model_class

    assert {mt: model_class(mt).config_defaults for mt in DEFAULTS} == DEFAULTS
