"""One reader per Hugging Face ``model_type``: a (normalised) ``config.json`` dict → the model's
layers (`READERS`), read as the torch families read the same keys (older spellings, defaults,
per-layer kinds checked as transformers checks them). `hf_config` picks the reader and reads what
is not a layer (sizes, tied embeddings, a multimodal wrapper)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from radixflow.costmodel.shape.config_values import Config, factor, first_set, integer, listed, positive
from radixflow.costmodel.shape.mixer_shapes import Attention, GatedDeltaNet, Mamba2, Mixer, ShortConv
from radixflow.costmodel.shape.model_shape import Layer, Mlp
from radixflow.plugins import Registry


def _attention(cfg: Config, gated: bool = False) -> Attention:
    heads = positive(cfg, "num_attention_heads")
    # nulls are absent keys by now: a 0 stays 0, for `limits.shape_problem` to refuse
    head_dim = integer(cfg, "head_dim") if "head_dim" in cfg else integer(cfg, "hidden_size") // heads
    return Attention(heads, integer(cfg, "num_key_value_heads", heads), head_dim, gated)


def _dense(cfg: Config, gated: bool = True) -> Mlp:
    return Mlp(integer(cfg, "intermediate_size"), gated)


def _llama(cfg: Config) -> tuple[Layer, ...]:
    return tuple(Layer((_attention(cfg),), _dense(cfg)) for _ in range(integer(cfg, "num_hidden_layers")))


_QWEN_LAYER_TYPES = ("linear_attention", "full_attention")


def _qwen_hybrid_types(cfg: Config) -> list[str]:
    n = integer(cfg, "num_hidden_layers")
    every = positive(cfg, "full_attention_interval", 4)
    default = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    return _checked_kinds(
        "layer_types", list(listed(cfg, "layer_types", []) or default), _QWEN_LAYER_TYPES, n
    )


def _checked_kinds(key: str, kinds: list[Any], known: Sequence[str], layers: int | None) -> list[Any]:
    """``kinds`` (config key ``key``), refused as the torch loader's schema and transformers refuse
    them: not one per layer (``layers``, where the config gives a count), or a kind not ``known``."""
    if layers is not None and len(kinds) != layers:
        raise ValueError(f"{key} has {len(kinds)} entries, but num_hidden_layers is {layers}")
    for i, kind in enumerate(kinds):
        if kind not in known:
            raise ValueError(f"{key}[{i}] is {kind!r} (must be one of {', '.join(known)})")
    return kinds


def _qwen_moe(cfg: Config, index: int) -> Mlp:
    """The routed MoE of every Qwen3.5-MoE layer (transformers reads no per-layer choice there)."""
    return Mlp(
        integer(cfg, "moe_intermediate_size"),
        experts=integer(cfg, "num_experts"),
        top_k=integer(cfg, "num_experts_per_tok"),
        shared_intermediate=integer(cfg, "shared_expert_intermediate_size", 0),
        shared_gate=True,
    )


def _qwen_dense(cfg: Config, index: int) -> Mlp:
    """Dense Qwen3.5: every layer's MLP, whatever MoE fields the config carries (the torch family
    and transformers read none)."""
    return _dense(cfg)


def _qwen_mlp(cfg: Config, index: int) -> Mlp:
    """Qwen3-Next: MoE where ``num_experts``, ``mlp_only_layers`` and
    ``decoder_sparse_step`` put it, else the dense MLP."""
    experts = integer(cfg, "num_experts", 0)
    sparse = experts and index not in listed(cfg, "mlp_only_layers", [])
    if not sparse or (index + 1) % positive(cfg, "decoder_sparse_step", 1):
        return _dense(cfg)
    return _qwen_moe(cfg, index)


def _qwen_hybrid(cfg: Config, mlp: Callable[[Config, int], Mlp] = _qwen_mlp) -> tuple[Layer, ...]:
    gdn = GatedDeltaNet(
        integer(cfg, "linear_num_key_heads"),
        integer(cfg, "linear_num_value_heads"),
        integer(cfg, "linear_key_head_dim"),
        integer(cfg, "linear_value_head_dim"),
        integer(cfg, "linear_conv_kernel_dim", 4),
    )
    attn = _attention(cfg, gated=True)
    return tuple(
        Layer((attn if kind == "full_attention" else gdn,), mlp(cfg, i))
        for i, kind in enumerate(_qwen_hybrid_types(cfg))
    )


def _qwen3_5(cfg: Config) -> tuple[Layer, ...]:
    return _qwen_hybrid(cfg, _qwen_dense)


def _qwen3_5_moe(cfg: Config) -> tuple[Layer, ...]:
    return _qwen_hybrid(cfg, _qwen_moe)


def _lfm2_ff(cfg: Config) -> int:
    """As `models.families.lfm2.intermediate_size` reads it: ``block_ff_dim`` over
    ``intermediate_size`` (as transformers' Lfm2Config), and the auto-adjusted width is rounded up
    to ``block_multiple_of`` with or without a multiplier (which defaults to 1.0 there)."""
    if first_set(cfg, ("block_ff_dim", "intermediate_size"), None) is None:
        raise KeyError("intermediate_size")  # the current name, not the older one read first
    size = integer(cfg, ("block_ff_dim", "intermediate_size"))
    if first_set(cfg, ("block_auto_adjust_ff_dim",), True):
        multiplier = factor(cfg, "block_ffn_dim_multiplier", 1.0)
        multiple = positive(cfg, "block_multiple_of", 256)
        size = int(multiplier * int(2 * size / 3))
        size = multiple * ((size + multiple - 1) // multiple)
    return size


def _lfm2(cfg: Config) -> tuple[Layer, ...]:
    n, hidden = integer(cfg, "num_hidden_layers"), integer(cfg, "hidden_size")
    # as `models.families.lfm2.layer_types` reads them: with neither key every layer is attention
    attn_idx = set(listed(cfg, "full_attn_idxs", range(n)))
    types = listed(cfg, "layer_types", ["full_attention" if i in attn_idx else "conv" for i in range(n)])
    _checked_kinds("layer_types", list(types), ("conv", "full_attention"), n)
    conv = ShortConv(hidden, integer(cfg, "conv_L_cache", 3))
    mlp = Mlp(_lfm2_ff(cfg))
    return tuple(Layer((_attention(cfg) if t == "full_attention" else conv,), mlp) for t in types)


# Nemotron-H's fields spelt two ways, the one read first first: transformers' NemotronHConfig
# sets each from an older mamba_* keyword or an attribute_map name over its own (the torch
# family's `models.families.layer_patterns.NEMOTRON_FIELDS`)
_NEMOTRON_FIELDS = {
    "groups": ("mamba_n_groups", "n_groups"),
    "conv_kernel": ("mamba_d_conv", "conv_kernel"),
    "experts": ("num_local_experts", "n_routed_experts"),
    "pattern": ("layer_types", "layers_block_type"),
}


def _nemotron_mamba(cfg: Config) -> Mamba2:
    """As `models.families.nemotron_h.nemotron_mamba_spec` reads it: either spelling
    (`_NEMOTRON_FIELDS`), and its defaults."""
    return Mamba2(
        integer(cfg, "mamba_num_heads"),
        integer(cfg, "mamba_head_dim"),
        integer(cfg, "ssm_state_size", 128),
        integer(cfg, _NEMOTRON_FIELDS["groups"], 8),
        integer(cfg, _NEMOTRON_FIELDS["conv_kernel"], 4),
    )


_NEMOTRON_CODES = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
_NEMOTRON_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
_NEMOTRON_KINDS = tuple(_NEMOTRON_CODES.values())


def _nemotron_kinds(cfg: Config) -> list[str]:
    """Per-layer kinds as `models.families.layer_patterns.nemotron_kinds` reads them: ``layer_types`` or
    ``layers_block_type`` (`_NEMOTRON_FIELDS`, with the legacy names), else
    ``hybrid_override_pattern``."""
    count = first_set(cfg, ("num_hidden_layers",), None)  # optional: the pattern says it
    layers = None if count is None else integer(cfg, "num_hidden_layers")
    key = next((k for k in _NEMOTRON_FIELDS["pattern"] if cfg.get(k)), None)
    if key is not None:
        kinds = _checked_kinds(key, list(listed(cfg, key, [])), (*_NEMOTRON_KINDS, *_NEMOTRON_LEGACY), layers)
        return [_NEMOTRON_LEGACY.get(k, k) for k in kinds]
    if cfg.get("hybrid_override_pattern") is None:
        raise KeyError("hybrid_override_pattern")  # nor layers_block_type: no layer pattern at all
    codes = _checked_kinds(
        "hybrid_override_pattern", list(cfg["hybrid_override_pattern"]), tuple(_NEMOTRON_CODES), layers
    )
    return [_NEMOTRON_CODES[c] for c in codes]


def _nemotron_moe(cfg: Config) -> Mlp:
    return Mlp(
        integer(cfg, "moe_intermediate_size", 0),
        gated=False,
        experts=integer(cfg, _NEMOTRON_FIELDS["experts"], 0),
        top_k=integer(cfg, "num_experts_per_tok", 0),
        shared_intermediate=integer(cfg, "moe_shared_expert_intermediate_size", 0),
        latent=integer(cfg, "moe_latent_size", 0),
    )


# block kind -> its layer, built only for a kind the pattern has: the torch loader requires a
# kind's fields (intermediate_size, the mamba widths) only where a block of that kind is
_NEMOTRON_LAYERS: dict[str, Callable[[Config], Layer]] = {
    "linear_attention": lambda cfg: Layer((_nemotron_mamba(cfg),)),
    "full_attention": lambda cfg: Layer((_attention(cfg),)),
    "mlp": lambda cfg: Layer((), _dense(cfg, gated=False)),
    "moe": lambda cfg: Layer((), _nemotron_moe(cfg)),
}


def _nemotron_h(cfg: Config) -> tuple[Layer, ...]:
    kinds = _nemotron_kinds(cfg)
    by_kind = {k: _NEMOTRON_LAYERS[k](cfg) for k in dict.fromkeys(kinds)}
    return tuple(by_kind[k] for k in kinds)


def _falcon_mamba(cfg: Config) -> Mamba2:
    """As `models.families.falcon_h1.falcon_mamba_spec` reads it, with its defaults: head dim
    "auto" splits the SSM's inner width over the heads."""
    heads, head_dim = _falcon_ssm_heads(cfg)
    return Mamba2(
        heads,
        head_dim,
        integer(cfg, "mamba_d_state", 256),
        integer(cfg, "mamba_n_groups", 1),
        integer(cfg, "mamba_d_conv", 4),
    )


def _falcon_ssm_heads(cfg: Config) -> tuple[int, int]:
    """(heads, head dim) of Falcon-H1's SSM, which must fill its inner width exactly, as
    transformers' FalconH1Config and the torch runner check (`Mamba2` is costed as heads x head
    dim wide: a mismatch was costed as a narrower or wider SSM than the config's)."""
    given = "mamba_d_ssm" in cfg
    expand = factor(cfg, "mamba_expand", 2)
    inner = positive(cfg, "mamba_d_ssm") if given else int(expand * integer(cfg, "hidden_size"))
    size = f"mamba_d_ssm ({inner})" if given else f"mamba_expand x hidden_size ({inner})"
    heads = positive(cfg, "mamba_n_heads", 128)
    if first_set(cfg, ("mamba_d_head",), "auto") == "auto":
        if inner % heads:
            raise ValueError(f"mamba_n_heads must divide the SSM's inner size {size}, got {heads}")
        return heads, inner // heads
    head_dim = integer(cfg, "mamba_d_head")
    if heads * head_dim != inner:
        raise ValueError(
            f"mamba_d_head {head_dim} x mamba_n_heads {heads} is {heads * head_dim}, "
            f"not the SSM's inner size {size}"
        )
    return heads, head_dim


def _falcon_h1(cfg: Config) -> tuple[Layer, ...]:
    # attention and Mamba2 side by side in every layer, then the MLP: every layer carries state
    mixers: tuple[Mixer, ...] = (_attention(cfg), _falcon_mamba(cfg))
    return tuple(Layer(mixers, _dense(cfg)) for _ in range(integer(cfg, "num_hidden_layers")))


READERS: Registry[Callable[[Config], tuple[Layer, ...]]] = Registry(
    "config reader",
    read_on_import=True,
    entries={
        "llama": _llama,
        "qwen3": _llama,
        "qwen3_5_text": _qwen3_5,
        "qwen3_5_moe_text": _qwen3_5_moe,
        "qwen3_next": _qwen_hybrid,
        "lfm2": _lfm2,
        "nemotron_h": _nemotron_h,
        "falcon_h1": _falcon_h1,
    },
)
