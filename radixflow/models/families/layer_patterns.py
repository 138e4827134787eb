"""The per-layer kinds a family reads from its config.json pattern, decoded once for the schema's
checks (`schemas`) and the model alike, so the two never read a pattern differently: the hybrids'
``layer_types`` or ``full_attention_interval`` (`hybrid_kinds`), Qwen3-Next's MoE layers
(`next_moe_layer`), LFM2's ``layer_types`` or ``full_attn_idxs`` (`lfm2_kinds`) and Nemotron-H's
``layers_block_type`` or ``hybrid_override_pattern`` (`nemotron_kinds`), with Nemotron-H's
fields spelt two ways (`NEMOTRON_FIELDS`). Pure Python (no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radixflow.models.presets.lfm2 import ATTENTION, CONV
from radixflow.models.presets.nemotron_h import NEMOTRON_PATTERN  # the pattern string's codes

HYBRID_KINDS = ("linear_attention", "full_attention")


def hybrid_kinds(data: Mapping[str, Any]) -> list[str]:
    """Qwen3.5 / Qwen3-Next per-layer kinds: ``layer_types``, else every
    ``full_attention_interval``-th layer (4 by default) is full attention."""
    types = data.get("layer_types")
    if types:
        return list(types)
    interval = data.get("full_attention_interval") or 4
    n = data["num_hidden_layers"]
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]


def next_moe_layer(data: Mapping[str, Any], idx: int) -> bool:
    """Whether Qwen3-Next's layer ``idx`` is MoE, as transformers decides: unless listed in
    ``mlp_only_layers`` or off the ``decoder_sparse_step``, where ``num_experts`` > 0."""
    if (data.get("num_experts") or 0) <= 0 or idx in (data.get("mlp_only_layers") or []):
        return False
    return (idx + 1) % (data.get("decoder_sparse_step") or 1) == 0


def next_has_moe(data: Mapping[str, Any]) -> bool:
    """Whether any of Qwen3-Next's layers is MoE (`next_moe_layer`)."""
    return any(next_moe_layer(data, i) for i in range(data["num_hidden_layers"]))


LFM2_KINDS = (CONV, ATTENTION)


def lfm2_kinds(data: Mapping[str, Any]) -> list[str]:
    """LFM2's per-layer kinds: ``layer_types``, else attention at ``full_attn_idxs`` and conv
    elsewhere (every layer attention where neither is given)."""
    n = data["num_hidden_layers"]
    types = data.get("layer_types")
    if types is not None:
        return list(types)
    attn = data.get("full_attn_idxs")
    attn = range(n) if attn is None else attn
    return [ATTENTION if i in attn else CONV for i in range(n)]


NEMOTRON_KINDS = ("linear_attention", "full_attention", "mlp", "moe")
NEMOTRON_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}


def nemotron_kinds(data: Mapping[str, Any]) -> list[str]:
    """Nemotron-H's per-layer kinds: ``layer_types`` or ``layers_block_type`` (legacy names mapped),
    else the older ``hybrid_override_pattern`` string."""
    types = next((data[k] for k in NEMOTRON_FIELDS["pattern"] if data.get(k)), None)
    if types:
        return [NEMOTRON_LEGACY.get(t, t) for t in types]
    pattern = data.get("hybrid_override_pattern")
    if pattern is None:
        raise ValueError("nemotron_h config needs layers_block_type or hybrid_override_pattern")
    return [NEMOTRON_PATTERN[ch] for ch in pattern]


# Nemotron-H's fields spelt two ways, in the order the model reads them: transformers'
# NemotronHConfig sets each from the first (an older mamba_* keyword, an attribute_map name) over
# the second, its own
NEMOTRON_FIELDS = {
    "groups": ("mamba_n_groups", "n_groups"),
    "conv_kernel": ("mamba_d_conv", "conv_kernel"),
    "conv_bias": ("mamba_conv_bias", "use_conv_bias"),
    "dt_min": ("mamba_dt_min", "time_step_min"),
    "experts": ("num_local_experts", "n_routed_experts"),
    "pattern": ("layer_types", "layers_block_type"),
}
# NemotronHConfig's SSM groups where config.json leaves n_groups out: the model and the schema's
# check that they split the heads read this one value
NEMOTRON_GROUPS = 8
# Its router's groups where config.json leaves n_group out (one group: every expert in it), and
# the groups it chooses from where it leaves topk_group out: read by the router and its checks
NEMOTRON_ROUTER_GROUPS = 1
NEMOTRON_TOPK_GROUPS = 1
