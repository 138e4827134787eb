"""The parts of config.json the families' schemas share: every model's sizes (`BASE`), an attention
layer's heads (`ATTENTION`; `HYBRID_ATTENTION` where a pattern may have no attention layer), a
rotary embedding's settings (`PARTIAL_ROPE`, `PLAIN_ROPE`, `SCALED_ROPE`, each checked to fit the
heads by `EvenRotary`), a Gated DeltaNet's heads (`DELTANET`), Falcon-H1's SSM sizes
(`falcon_ssm`, their check `FalconSsmHeads`), Nemotron-H's expert routing (`NEMOTRON_ROUTER`),
Qwen3-Next's MoE layers (`NEXT_MOE_LAYERS`), and the value types several families read
(activations, epsilons, multipliers, conv kernels). Each family's own fields and relations, and its
schema, are in `schemas.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from radixflow.models.config_rules import (
    AtMost,
    Divides,
    Equals,
    HasLayer,
    Holds,
    RequiredWhen,
    When,
    each_when,
)
from radixflow.models.config_schema import ConfigField, Resolved, Rule, Schema, Table
from radixflow.models.config_types import AnyOf, Bool, Float, Int, ListOf, Str, as_number
from radixflow.models.config_view import ACTIVATION_NAMES, Config, rope_parameters
from radixflow.models.families.layer_patterns import (
    NEMOTRON_ROUTER_GROUPS,
    NEMOTRON_TOPK_GROUPS,
    next_has_moe,
)
from radixflow.problems import Problem

ACTIVATION = Str(ACTIVATION_NAMES)
EPS = Float(above=0.0)  # a norm's epsilon: 0 divides by zero on an all-zero row
MULTIPLIER = Float()  # a muP scale: any finite number
POSITIVE = Float(above=0.0)
# A conv window of kernel - 1 values is a recurrent layer's state, so a kernel has at least 2 taps.
CONV_KERNEL = Int(2)
# A layer count no model has (the largest public ones have ~100): refused at once, where building it
# a layer at a time took days; the sim's own limit (`costmodel.shape.limits.MAX_LAYERS`)
LAYERS = Int(1, high=1 << 16)
# Likewise an MoE's routed experts (the largest have 512): Nemotron-H builds a module for each
MAX_EXPERTS = 1 << 16
EXPERTS = Int(1, high=MAX_EXPERTS)

# --------------------------------------------------------------------------- shared parts

# Read by every family (the runner reads the context length and the end-of-sequence ids).
BASE = Schema(
    (
        ConfigField("vocab_size", Int(1), required=True),
        ConfigField("hidden_size", Int(1), required=True),
        ConfigField("tie_word_embeddings", Bool()),
        ConfigField("eos_token_id", AnyOf((Int(0), ListOf(Int(0))))),
        ConfigField("max_position_embeddings", Int(1)),
    ),
    rules=(AtMost("eos_token_id", "vocab_size", strict=True),),  # an id the model can emit
)

# Read by `layers.attention_heads` (every attention layer); KV heads serve groups of query heads.
ATTENTION = Schema(
    (
        ConfigField("num_attention_heads", Int(1), required=True),
        ConfigField("num_key_value_heads", Int(1)),
        ConfigField("head_dim", Int(1)),
        ConfigField("attention_bias", Bool()),
    ),
    rules=(
        Divides("num_key_value_heads", "num_attention_heads"),
        Divides("num_attention_heads", "hidden_size", unless="head_dim"),
    ),
)
# A hybrid's heads relate only where its pattern has an attention layer: transformers reads them
# nowhere else, and runs a model without one whatever they are. Nor are they needed there: its
# config class fills in a head count that nothing reads (each layer reads its own kind's fields)
ATTENTION_LAYERS = HasLayer("full_attention")
HYBRID_ATTENTION = Schema(
    tuple(replace(f, required=False) for f in ATTENTION.fields),
    (RequiredWhen(("num_attention_heads",), ATTENTION_LAYERS), *each_when(ATTENTION_LAYERS, ATTENTION.rules)),
)


@dataclass(frozen=True)
class EvenRotary:
    """The rotary embedding fits each head: it rotates ``head_dim`` times the rotated share dims,
    rounded up to even (as transformers rounds them), so a fully rotated head of odd size is one
    dim short (the first forward failed deep in the kernels; transformers refuses it too)."""

    partial: bool  # the family reads partial_rotary_factor (the hybrids); else every dim rotates
    partial_default: float = 1.0  # the share rotated where the config names none

    def check(self, config: Resolved) -> Problem | None:
        heads, hidden = config.get("num_attention_heads"), config.get("hidden_size")
        if heads is None or hidden is None:
            return None
        head_dim = config.get("head_dim") or hidden // heads
        share = 1.0
        if self.partial:
            rope = rope_parameters(Config(dict(config.data)))
            share = as_number(rope.get("partial_rotary_factor", self.partial_default)) or 1.0
        if head_dim % 2 == 0 or int(head_dim * share) != head_dim:
            return None
        given = config.get("head_dim") is not None
        param = config.key("head_dim") if given else config.key("num_attention_heads")
        source = "" if given else f" ({hidden} // {heads})"
        why = "all rotated: rotary embedding needs an even number"
        return Problem(param, f"gives heads of {head_dim} dims{source}, {why}")


def _rope(
    types: tuple[str, ...],
    inner: tuple[ConfigField, ...] = (),
    rules: tuple[Rule, ...] = (),
    top: tuple[ConfigField, ...] = (),
    legacy: bool = False,
    even: Rule = EvenRotary(partial=False),
) -> Schema:
    """``rope_parameters`` (and with ``legacy`` the older ``rope_scaling``) holding the rope types a
    family supports and ``inner`` fields, plus the top-level fields read when it lacks them; the
    rotary dims must fit the heads (``even``)."""
    table = Table(
        Schema(
            (
                ConfigField("rope_type", Str(types), aliases=("type",)),
                ConfigField("rope_theta", POSITIVE),
                *inner,
            ),
            rules,
        )
    )
    names = ("rope_parameters", "rope_scaling") if legacy else ("rope_parameters",)
    fields = (*(ConfigField(n, table) for n in names), ConfigField("rope_theta", POSITIVE), *top)
    return Schema(fields, rules=(even,))


ROTARY_FRACTION = Float(above=0.0, high=1.0)  # the share of each head's dims that rotate
_FRACTION = ConfigField("partial_rotary_factor", ROTARY_FRACTION)
# `mixers.gated_attention.rope_settings` (the hybrids): plain rope over part of each head; the
# older rope_scaling is read too (`layers.rope_parameters`), as transformers reads it
PARTIAL_ROPE = _rope(
    ("default",), inner=(_FRACTION,), top=(_FRACTION,), legacy=True, even=EvenRotary(True, 0.25)
)
# `lfm2.rope_theta`: plain rope. Lfm2Config has no head_dim to check, so transformers runs a model
# without attention layers whatever its heads: the rotary dims are checked where a layer attends
PLAIN_ROPE = _rope(("default",), legacy=True, even=When(ATTENTION_LAYERS, EvenRotary(partial=False)))
# `llama.build_rotary` (Llama, Qwen3, Falcon-H1): scaled frequencies need their factors, and
# llama3's ramp runs from the low to the high frequency factor.
SCALED_ROPE = _rope(
    ("default", "linear", "llama3"),
    inner=(
        ConfigField("factor", POSITIVE),
        ConfigField("low_freq_factor", POSITIVE),
        ConfigField("high_freq_factor", POSITIVE),
        ConfigField("original_max_position_embeddings", Int(1)),
    ),
    rules=(
        RequiredWhen(("factor",), Equals("rope_type", ("linear", "llama3"))),
        RequiredWhen(("low_freq_factor", "high_freq_factor"), Equals("rope_type", ("llama3",))),
        AtMost("low_freq_factor", "high_freq_factor", strict=True),
    ),
    # a top-level original context replaces rope_parameters' own (`layers.rope_parameters`)
    top=(
        ConfigField("max_position_embeddings", Int(1)),
        ConfigField("original_max_position_embeddings", Int(1)),
    ),
    legacy=True,
)

# --------------------------------------------------------------------------- Falcon-H1's SSM


FALCON_SSM_HEADS = 128  # FalconH1Config's mamba_n_heads where config.json leaves it out


def falcon_ssm(data: Mapping[str, Any]) -> tuple[int, int, int]:
    """Falcon-H1's SSM (inner size, heads, head size) as transformers' FalconH1Config reads them:
    ``mamba_d_ssm`` (null: ``mamba_expand`` x hidden), ``mamba_n_heads`` heads of
    ``mamba_d_head`` dims ("auto": inner // heads). Read by the model and its schema alike."""
    inner = data.get("mamba_d_ssm") or int((data.get("mamba_expand") or 2) * data["hidden_size"])
    heads = data.get("mamba_n_heads") or FALCON_SSM_HEADS
    head_dim = data.get("mamba_d_head") or "auto"
    return inner, heads, inner // heads if head_dim == "auto" else head_dim


@dataclass(frozen=True)
class FalconSsmHeads:
    """Falcon-H1's SSM heads fill its inner size exactly (`falcon_ssm`), as FalconH1Config checks:
    otherwise the model could not be built, and the error named no value."""

    def check(self, config: Resolved) -> Problem | None:
        inner, heads, head_dim = falcon_ssm(config.data)
        if heads * head_dim == inner:
            return None
        given = config.get("mamba_d_ssm") is not None
        size = f"mamba_d_ssm ({inner})" if given else f"mamba_expand x hidden_size ({inner})"
        if config.get("mamba_d_head") not in (None, "auto"):
            why = (
                f"{head_dim} x mamba_n_heads ({heads}) is {heads * head_dim}, not the SSM's inner size {size}"
            )
            return Problem(config.key("mamba_d_head"), why)
        return Problem(config.key("mamba_n_heads"), f"must divide the SSM's inner size {size}, got {heads}")


@dataclass(frozen=True)
class RoutedWithinGroups:
    """Nemotron-H's router takes its ``num_experts_per_tok`` experts from the ``topk_group`` best
    of ``n_group`` groups only: more than those groups hold would take masked-out experts, in
    whatever order the sort leaves them (transformers' unsorted and our sorted top-k may differ).
    Groups left out are NemotronHConfig's, as `nemotron_h_moe.NemotronHRouter` reads them."""

    def check(self, config: Resolved) -> Problem | None:
        experts, k = config.get("n_routed_experts"), config.get("num_experts_per_tok")
        groups = config.get("n_group") or NEMOTRON_ROUTER_GROUPS
        chosen = config.get("topk_group") or NEMOTRON_TOPK_GROUPS
        if experts is None or k is None or experts % groups or chosen > groups:
            return None  # unset, or another rule's problem
        allowed = chosen * (experts // groups)
        if k <= allowed:
            return None
        why = (
            f"must be at most the {allowed} experts of topk_group ({chosen}) groups of "
            f"{config.key('n_routed_experts')} ({experts}) / n_group ({groups}), got {k}"
        )
        return Problem(config.key("num_experts_per_tok"), why)


# Nemotron-H's router, checked where the pattern has MoE layers (transformers reads it nowhere else)
NEMOTRON_ROUTER = (
    Divides("n_group", "n_routed_experts"),
    AtMost("topk_group", "n_group", bound_default=NEMOTRON_ROUTER_GROUPS),
    AtMost("num_experts_per_tok", "n_routed_experts"),
    RoutedWithinGroups(),
)
# Qwen3-Next's router sizes matter only where a layer is MoE: none where every layer is in
# mlp_only_layers or off the sparse step, and transformers then runs whatever they are
NEXT_MOE_LAYERS = Holds(next_has_moe, "the MoE layers")

# `mixers.gated_deltanet.GatedDeltaNet`: each key head serves a group of value heads.
DELTANET = Schema(
    (
        ConfigField("linear_num_key_heads", Int(1), required=True),
        ConfigField("linear_num_value_heads", Int(1), required=True),
        ConfigField("linear_key_head_dim", Int(1), required=True),
        ConfigField("linear_value_head_dim", Int(1), required=True),
        ConfigField("linear_conv_kernel_dim", CONV_KERNEL),
    ),
    # only where the pattern has a DeltaNet layer: transformers reads the heads nowhere else
    rules=(When(HasLayer("linear_attention"), Divides("linear_num_key_heads", "linear_num_value_heads")),),
)
