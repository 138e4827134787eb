"""Every family's config.json is checked on load (`read_config` against the family's schema): each
bad value is a one-line `CheckpointError` naming the file, the field and the value."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from radixflow.models.config_schema import validate_config
from radixflow.models.io.loader import CheckpointError, read_config
from radixflow.models.registry import model_class
from radixflow.models.zoo_catalogue import ZOO, preset_config

# family preset -> (its norm epsilon field, its layer-pattern field or None where it has none)
FAMILIES: dict[str, tuple[str, str | None]] = {
    "qwen3_5-tiny": ("rms_norm_eps", "layer_types"),
    "qwen3_next-tiny": ("rms_norm_eps", "layer_types"),
    "lfm2-tiny": ("norm_eps", "layer_types"),
    "nemotron_h-tiny": ("layer_norm_epsilon", "layers_block_type"),
    "falcon_h1-tiny": ("rms_norm_eps", None),  # every layer is Mamba2 + attention: no pattern
    "llama-tiny": ("rms_norm_eps", "layer_types"),  # optional: transformers may write one
    "qwen3-tiny": ("rms_norm_eps", "layer_types"),
}
Change = Callable[[dict[str, Any], str, str | None], dict[str, Any]]


def pattern(config: dict[str, Any], field: str) -> list[str]:
    """The preset's layer pattern (Llama's presets have none: all full attention)."""
    return list(config.get(field) or ["full_attention"] * config["num_hidden_layers"])


def short_pattern(c: dict[str, Any], eps: str, field: str | None) -> dict[str, Any]:
    assert field is not None
    return {**c, field: pattern(c, field)[:-1]}


def unknown_kind(c: dict[str, Any], eps: str, field: str | None) -> dict[str, Any]:
    assert field is not None
    return {**c, field: ["sliding_attention", *pattern(c, field)[1:]]}


def zero_layers(c: dict[str, Any], eps: str, field: str | None) -> dict[str, Any]:
    return {**c, "num_hidden_layers": 0, **({field: []} if field else {})}


def without(name: str) -> Change:
    return lambda c, eps, field: {k: v for k, v in c.items() if k != name}


def setting(name: str, value: Any) -> Change:
    return lambda c, eps, field: {**c, name: value}


def eps_as_string(c: dict[str, Any], eps: str, field: str | None) -> dict[str, Any]:
    return {**c, eps: "1e-6"}


def eos_past_vocab(c: dict[str, Any], eps: str, field: str | None) -> dict[str, Any]:
    return {**c, "eos_token_id": [0, c["vocab_size"]]}


# case -> (change, the fields the error may name, what it says about the value)
CASES: dict[str, tuple[Change, tuple[str, ...], str]] = {
    "short-pattern": (short_pattern, ("PATTERN",), "but num_hidden_layers is"),
    "unknown-layer-kind": (unknown_kind, ("PATTERN",), "entry 0: must be one of"),
    "zero-layers": (zero_layers, ("num_hidden_layers", "PATTERN"), ""),
    "fractional-heads": (
        setting("num_attention_heads", 4.5),
        ("num_attention_heads",),
        "must be an integer, got 4.5",
    ),
    "float-head-dim": (setting("head_dim", 32.0), ("head_dim",), "must be an integer, got 32.0"),
    "string-eps": (eps_as_string, ("EPS",), 'must be a positive finite number, got "1e-6"'),
    "bool-as-int": (
        setting("num_hidden_layers", True),
        ("num_hidden_layers",),
        "must be an integer, got true",
    ),
    "int-as-bool": (
        setting("tie_word_embeddings", 1),
        ("tie_word_embeddings",),
        "must be true or false, got 1",
    ),
    "missing-field": (without("hidden_size"), ("hidden_size",), "missing (must be a positive integer)"),
    "kv-heads-not-dividing": (setting("num_key_value_heads", 3), ("num_key_value_heads",), "must divide"),
    "negative-vocab": (setting("vocab_size", -5), ("vocab_size",), "must be a positive integer, got -5"),
    # once reported per prompt as "the model context is -1", never naming config.json
    "negative-context": (
        setting("max_position_embeddings", -1),
        ("max_position_embeddings",),
        "must be a positive integer, got -1",
    ),
    "eos-past-vocab": (eos_past_vocab, ("eos_token_id",), "must be below vocab_size"),
    # a garbled count: the model was built a layer at a time (7 ms each on the meta device) for
    # days, where the sim refuses it at once (costmodel.shape.limits.MAX_LAYERS)
    "layers-past-any-model": (
        setting("num_hidden_layers", 10**9),
        ("num_hidden_layers",),
        "must be a positive integer <= 65536, got 1000000000",
    ),
}
PATTERN_CASES = {"short-pattern", "unknown-layer-kind"}


def write(path: Path, config: dict[str, Any]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def refused(tmp_path: Path, config: dict[str, Any]) -> CheckpointError:
    with pytest.raises(CheckpointError) as info:
        read_config(write(tmp_path, config))
    return info.value


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_bad_config_value_is_one_line_naming_file_field_and_value(tmp_path, family, case) -> None:
    eps, field = FAMILIES[family]
    if field is None and case in PATTERN_CASES:
        pytest.skip(f"{family} has no layer pattern")
    change, params, says = CASES[case]
    params = tuple({"PATTERN": field, "EPS": eps}.get(p, p) for p in params)
    error = refused(tmp_path, change(preset_config(family), eps, field))
    text = str(error)
    assert "\n" not in text and text.startswith(f"{tmp_path / 'config.json'}: ")
    assert error.problem.param in params, text
    assert text.startswith(f"{tmp_path / 'config.json'}: {error.problem.param}: ") and says in text


@pytest.mark.parametrize("name", [n for n in ZOO if n != "smollm2-135m"])
def test_every_preset_config_is_valid(tmp_path, name) -> None:
    config = preset_config(name)
    assert validate_config(model_class(config["model_type"]).config_schema, config) == []
    assert read_config(write(tmp_path, config)).to_dict() == config


@pytest.mark.parametrize(
    "cls",
    [
        "LlamaConfig",
        "Qwen3Config",
        "Qwen3_5TextConfig",
        "Qwen3NextConfig",
        "Lfm2Config",
        "NemotronHConfig",
        "FalconH1Config",
    ],
)
def test_the_configs_transformers_writes_are_valid(tmp_path, cls) -> None:
    """Hub configs carry every field of transformers' config class, in its own spelling
    (tagged infinities, legacy aliases, keys no family reads)."""
    transformers = pytest.importorskip("transformers")
    config = json.loads(getattr(transformers, cls)().to_json_string())
    assert read_config(write(tmp_path, config)).model_type == config["model_type"]


# family-specific relations: (preset, change, field named, what it says)
SPECIFIC = [
    (
        "qwen3_5-tiny",
        {"linear_num_value_heads": 3},
        "linear_num_key_heads",
        "must divide linear_num_value_heads",
    ),
    ("qwen3_5-tiny", {"rope_parameters": {"rope_type": "yarn"}}, "rope_parameters.rope_type", '"yarn"'),
    # a fully rotated head of odd size: the rotary tables (an even size) do not fit it, and the
    # first forward failed deep in the kernels
    ("llama-tiny", {"head_dim": 11}, "head_dim", "11 dims, all rotated"),
    ("lfm2-tiny", {"hidden_size": 66, "num_attention_heads": 6}, "num_attention_heads", "11 dims"),
    ("falcon_h1-tiny", {"head_dim": 9}, "head_dim", "an even number"),
    (
        "qwen3_5-tiny",
        {"head_dim": 11, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 1.0}},
        "head_dim",
        "all rotated",
    ),
    # transformers reads the older spelling too, over rope_parameters
    ("qwen3_5-tiny", {"rope_scaling": {"type": "linear"}}, "rope_scaling.type", '"linear"'),
    ("lfm2-tiny", {"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling.rope_type", '"yarn"'),
    ("qwen3_5-tiny", {"layer_types": None, "full_attention_interval": 0}, "full_attention_interval", "got 0"),
    ("qwen3_next-tiny", {"num_experts_per_tok": 5}, "num_experts_per_tok", "at most num_experts (4)"),
    # left out, Qwen3_5TextConfig's 4 KV heads, which 6 query heads cannot share: the error says
    # where the 4 it names comes from
    (
        "qwen3_5-tiny",
        {"num_key_value_heads": None, "num_attention_heads": 6},
        "num_key_value_heads",
        "must divide num_attention_heads (6), got 4 (its default)",
    ),
    # left out, transformers' 10 (which 4 experts cannot route to)
    (
        "qwen3_next-tiny",
        {"num_experts_per_tok": None},
        "num_experts_per_tok",
        "num_experts (4), got 10 (its default)",
    ),
    ("qwen3_next-tiny", {"mlp_only_layers": [4]}, "mlp_only_layers", "entry 4 must be below"),
    ("qwen3_next-tiny", {"num_experts": 10**9}, "num_experts", "<= 65536, got 1000000000"),
    ("lfm2-tiny", {"full_attn_idxs": [1, 9]}, "full_attn_idxs", "entry 9 must be below num_hidden_layers"),
    ("lfm2-tiny", {"conv_L_cache": 1}, "conv_L_cache", "must be an integer >= 2, got 1"),
    ("nemotron_h-tiny", {"layers_block_type": None}, "layers_block_type", "hybrid_override_pattern"),
    (
        "nemotron_h-tiny",
        {"layers_block_type": None, "hybrid_override_pattern": "M-*ME*X"},
        "hybrid_override_pattern",
        "'X'",
    ),
    (
        "nemotron_h-tiny",
        {"num_hidden_layers": None, "layers_block_type": []},
        "layers_block_type",
        "at least 1",
    ),
    ("nemotron_h-tiny", {"n_routed_experts": None}, "n_routed_experts", "needed for the 'moe' layers"),
    # a hybrid reads its heads only where it has attention layers, but there they are needed
    *(
        (f"{family}-tiny", {"num_attention_heads": None}, "num_attention_heads", "'full_attention' layers")
        for family in ("lfm2", "qwen3_5", "qwen3_next", "nemotron_h")
    ),
    # built one module per expert: a garbled count was built for days
    ("nemotron_h-tiny", {"n_routed_experts": 10**9}, "n_routed_experts", "<= 65536, got 1000000000"),
    ("nemotron_h-tiny", {"topk_group": 3}, "topk_group", "at most n_group (2)"),
    # the router picks experts only from its top topk_group groups: 6 of the 4 in one group of
    # 8 experts in 2 would take masked-out experts, whichever the sort puts first
    (
        "nemotron_h-tiny",
        {"num_experts_per_tok": 6, "topk_group": 1},
        "num_experts_per_tok",
        "at most the 4 experts of topk_group (1) groups of n_routed_experts (8) / n_group (2), got 6",
    ),
    # left out, NemotronHConfig's one group: the router's top-2 groups of one crashed the forward
    ("nemotron_h-tiny", {"n_group": None, "topk_group": 2}, "topk_group", "n_group (1 (its default))"),
    ("nemotron_h-tiny", {"n_groups": 3}, "n_groups", "must divide mamba_num_heads (8)"),
    # a layer kind's relations still hold where the pattern has one (only there: the configs of
    # test_configs_transformers_runs.py, which transformers runs, have none)
    ("nemotron_h-tiny", {"n_group": 3}, "n_group", "must divide n_routed_experts (8), got 3"),
    ("nemotron_h-tiny", {"num_experts_per_tok": 9}, "num_experts_per_tok", "at most n_routed_experts (8)"),
    (
        "qwen3_next-tiny",
        {"mlp_only_layers": [0, 1, 2], "num_experts_per_tok": 6},
        "num_experts_per_tok",
        "at most num_experts (4), got 6",
    ),
    (
        "lfm2-tiny",
        {"layer_types": None, "full_attn_idxs": [1], "num_key_value_heads": 3},
        "num_key_value_heads",
        "must divide num_attention_heads (4), got 3",
    ),
    # left out, NemotronHConfig's 8 groups: 12 heads do not split into them (the first forward
    # failed deep in the SSD kernel)
    ("nemotron_h-tiny", {"n_groups": None, "mamba_num_heads": 12}, "n_groups", "(12), got 8 (its default)"),
    ("falcon_h1-tiny", {"ssm_multipliers": [1.0] * 4}, "ssm_multipliers", "must have 5 entries"),
    ("falcon_h1-tiny", {"time_step_limit": [0.0, -1.0]}, "time_step_limit", "entry 1"),
    ("falcon_h1-tiny", {"mamba_d_head": "big"}, "mamba_d_head", 'or one of "auto", got "big"'),
    # heads that do not fill the SSM's inner size: the model could not be built (transformers
    # refuses them too), said without a value
    ("falcon_h1-tiny", {"mamba_d_head": 12}, "mamba_d_head", "12 x mamba_n_heads (8) is 96, not"),
    (
        "falcon_h1-tiny",
        {"mamba_n_heads": 6, "mamba_d_head": "auto"},
        "mamba_n_heads",
        "mamba_d_ssm (128), got 6",
    ),
    # left out, FalconH1Config's 128 SSM heads: 3 groups do not split them (the first forward
    # failed deep in the SSD kernel)
    (
        "falcon_h1-tiny",
        {"mamba_d_ssm": 384, "mamba_n_heads": None, "mamba_d_head": "auto", "mamba_n_groups": 3},
        "mamba_n_groups",
        "must divide mamba_n_heads (128 (its default)), got 3",
    ),
    # left out, the inner size is FalconH1Config's 1024
    (
        "falcon_h1-tiny",
        {"mamba_d_ssm": None, "mamba_n_heads": 3, "mamba_n_groups": 1, "mamba_d_head": "auto"},
        "mamba_n_heads",
        "mamba_d_ssm (1024), got 3",
    ),
    (
        "llama-tiny",
        {"rope_parameters": {"rope_type": "llama3", "factor": 8.0}},
        "rope_parameters.low_freq_factor",
        "needed",
    ),
    # read over rope_parameters' own by transformers (llama3): checked as that one is
    ("llama-tiny", {"original_max_position_embeddings": 0}, "original_max_position_embeddings", "got 0"),
    (
        "llama-tiny",
        {"use_sliding_window": True},
        "use_sliding_window",
        "sliding-window attention is not supported",
    ),
    (
        "llama-tiny",
        {"head_dim": None, "num_attention_heads": 5, "num_key_value_heads": 5},
        "num_attention_heads",
        "when head_dim is not given",
    ),
    ("qwen3-tiny", {"hidden_act": "gelu_new"}, "hidden_act", '"gelu_new"'),
    # transformers runs the DeltaNet's conv with hidden_act too; ours is SiLU only (the logits
    # were silently wrong)
    ("qwen3_5-tiny", {"hidden_act": "gelu"}, "hidden_act", 'Gated DeltaNet layers), got "gelu"'),
    ("qwen3_next-tiny", {"hidden_act": "relu"}, "hidden_act", 'Gated DeltaNet layers), got "relu"'),
    (
        "qwen3_5-tiny",
        {"layer_types": None, "full_attention_interval": 2, "hidden_act": "relu"},
        "hidden_act",
        'got "relu"',
    ),
]


@pytest.mark.parametrize(("family", "change", "param", "says"), SPECIFIC)
def test_family_relations(tmp_path, family, change, param, says) -> None:
    config = {**preset_config(family), **change}
    error = refused(tmp_path, {k: v for k, v in config.items() if v is not None})
    assert error.problem.param == param and says in str(error), str(error)


def test_a_hybrid_without_deltanet_layers_may_use_any_activation(tmp_path) -> None:
    config = {**preset_config("qwen3_5-tiny"), "hidden_act": "gelu"}
    config["layer_types"] = ["full_attention"] * config["num_hidden_layers"]
    assert read_config(write(tmp_path, config)).hidden_act == "gelu"


def test_an_odd_head_rotated_in_part_is_valid(tmp_path) -> None:
    """Qwen3.5 rotates a quarter of each head; 11 * 0.25 dims round up to 4, as in transformers."""
    config = {**preset_config("qwen3_5-tiny"), "head_dim": 11}
    assert read_config(write(tmp_path, config)).head_dim == 11


def test_the_older_nemotron_spelling_is_valid(tmp_path) -> None:
    config = copy.deepcopy(preset_config("nemotron_h-tiny"))
    del config["layers_block_type"]
    config["hybrid_override_pattern"] = "M-*ME*M"
    config["mamba_n_groups"] = config.pop("n_groups")
    assert read_config(write(tmp_path, config)).hybrid_override_pattern == "M-*ME*M"
    config["num_hidden_layers"] = 6
    assert refused(tmp_path, config).problem.param == "hybrid_override_pattern"


def test_a_multimodal_qwen3_5_config_is_checked_as_its_text_config(tmp_path) -> None:
    text = {**preset_config("qwen3_5-tiny"), "num_attention_heads": 4.5}
    config = {"model_type": "qwen3_5", "text_config": text}
    assert "num_attention_heads: must be an integer, got 4.5" in str(refused(tmp_path, config))


# each family's config.json with only what it must hold: the rest is each side's default
_SIZES = {"vocab_size": 101, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}
_DELTANET_HEADS = {
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
}
REQUIRED_ONLY: dict[str, dict[str, Any]] = {
    "llama": {"num_hidden_layers": 2, "intermediate_size": 40},
    "qwen3": {"num_hidden_layers": 2, "intermediate_size": 40},
    "qwen3_5_text": {"num_hidden_layers": 4, "intermediate_size": 40, **_DELTANET_HEADS},
    # no MoE key: transformers' Qwen3NextConfig defaults to 512 experts (every layer MoE), never dense
    "qwen3_next": {"num_hidden_layers": 4, "intermediate_size": 40, **_DELTANET_HEADS},
    "lfm2": {"num_hidden_layers": 2, "intermediate_size": 40},
    "nemotron_h": {
        "layers_block_type": ["mamba", "attention", "mlp", "moe"],
        "intermediate_size": 40,
        "mamba_num_heads": 4,
        "mamba_head_dim": 8,
        "n_groups": 2,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "moe_shared_expert_intermediate_size": 16,
    },
    "falcon_h1": {"num_hidden_layers": 2, "intermediate_size": 40, "mamba_n_heads": 4},
}


@pytest.mark.parametrize("model_type", sorted(REQUIRED_ONLY))
def test_a_config_of_required_fields_builds_the_sizes_transformers_builds(tmp_path, model_type) -> None:
    """What a family fills in for a field config.json leaves out is what transformers' config class
    fills in: every tensor, buffers too, of the same size (on the meta device: nothing allocated)."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    path = write(tmp_path, {"model_type": model_type, **_SIZES, **REQUIRED_ONLY[model_type]})
    config = read_config(path)
    with torch.device("meta"):
        ours = model_class(model_type)(config)
        ref = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(path))

    def size(model: Any) -> int:
        return sum(t.numel() for t in model.state_dict().values())

    assert size(ours) == size(ref)


def test_a_null_falcon_ssm_size_is_its_expansion_of_the_hidden_size(tmp_path) -> None:
    """FalconH1Config reads a null mamba_d_ssm as mamba_expand x hidden_size; heads that do not
    fill that are named with it."""
    config = {**preset_config("falcon_h1-tiny"), "mamba_d_ssm": None, "mamba_expand": 3}
    assert read_config(write(tmp_path, {**config, "mamba_d_head": "auto"})).mamba_expand == 3
    error = refused(tmp_path, {**config, "mamba_n_heads": 5, "mamba_n_groups": 1, "mamba_d_head": "auto"})
    assert error.problem.param == "mamba_n_heads" and "mamba_expand x hidden_size (192), got 5" in str(error)
