"""The sizes a `ModelShape` may have: what the cost model can cost.

A checkpoint's ``config.json`` is read by the shape readers as it is (`hf_config`); a zero, a
negative or a 10**400 in it would otherwise surface deep in the cost arithmetic (a ZeroDivisionError,
an OverflowError converting to float, or a negative time). Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from radixflow.costmodel.shape.mixer_shapes import Attention, GatedDeltaNet, Mamba2
from radixflow.costmodel.shape.model_shape import DEFAULT_CONTEXT as DEFAULT_CONTEXT  # for the runners
from radixflow.costmodel.shape.model_shape import ModelShape

MAX_LAYERS = 1 << 16  # the largest public models have ~100; a shape is a tuple of them
MAX_WIDTH = 1 << 24  # any one size: a hidden width, a vocabulary, heads, a head's dimension
MAX_CONTEXT = 1 << 30


def layer_count_problem(config: Mapping[str, Any]) -> str | None:
    """Why ``num_hidden_layers`` is too many to read (the readers build one layer each) or too few
    (below 1 they build none, and the refusal would name the empty result, not the key)."""
    n = config.get("num_hidden_layers")
    if n is None or isinstance(n, bool):
        return None  # a layer pattern may say it (Nemotron-H); a bool is the reader's to read
    try:  # as the readers read it: int(), so "12" is 12
        count = int(n)
    except (TypeError, ValueError, OverflowError):
        return None  # the reader refuses it in its own words
    if count < 1:
        return f"num_hidden_layers must be at least 1, got {n}"
    return f"num_hidden_layers must be at most {MAX_LAYERS}, got {n}" if count > MAX_LAYERS else None


def shape_problem(shape: ModelShape) -> str | None:
    """Why ``shape`` has a size the cost model cannot cost (None: every size is in range)."""
    if not 1 <= len(shape.layers) <= MAX_LAYERS:
        return f"has {len(shape.layers)} layers (must be 1 to {MAX_LAYERS})"
    sizes = [("hidden_size", shape.hidden, 1, MAX_WIDTH), ("vocab_size", shape.vocab_size, 1, MAX_WIDTH)]
    sizes.append(("max_position_embeddings", shape.max_context, 1, MAX_CONTEXT))
    for what, value, low, high in [*sizes, *_layer_sizes(shape)]:
        if not low <= value <= high:
            return f"gives {what} {value} (must be {low} to {high})"
    return _grouping_problem(shape)


# mixer type -> (its grouped heads, the heads each group serves): each of the first serves the
# same number of the second (transformers' num_key_value_groups, the delta rule's value heads per
# key head, Mamba2's heads per group), as the torch runner checks
GROUPED: dict[type, tuple[str, str]] = {
    Attention: ("kv_heads", "heads"),
    GatedDeltaNet: ("k_heads", "v_heads"),
    Mamba2: ("groups", "heads"),
}


def _grouping_problem(shape: ModelShape) -> str | None:
    """Why a layer's grouped heads cannot share the heads they serve (`GROUPED`)."""
    for i, layer in enumerate(shape.layers):
        for mixer in layer.mixers:
            grouping = GROUPED.get(type(mixer))  # LFM2's short conv has no heads
            if grouping is None:
                continue
            shared, served = grouping
            groups, heads = getattr(mixer, shared), getattr(mixer, served)
            if heads % groups:
                return f"gives layer {i}'s {mixer.kind} {shared} {groups} (must divide its {served}, {heads})"
    return None


def _layer_sizes(shape: ModelShape) -> Iterator[tuple[str, int, int, int]]:
    """(what, value, least, most) of every size of every layer's mixers and MLP."""
    for i, layer in enumerate(shape.layers):
        for mixer in layer.mixers:
            for name, value in _ints(mixer):
                yield f"layer {i}'s {mixer.kind} {name}", value, 1, MAX_WIDTH
        if layer.mlp is not None:
            for name, value in _ints(layer.mlp):  # a dense MLP's experts, top k and shared expert are 0
                yield f"layer {i}'s MLP {name}", value, 1 if name == "intermediate" else 0, MAX_WIDTH
            if layer.mlp.experts or layer.mlp.top_k:  # an MoE routes each token to 1 to all of its experts
                yield f"layer {i}'s MLP experts", layer.mlp.experts, 1, MAX_WIDTH
                yield f"layer {i}'s MLP top_k", layer.mlp.top_k, 1, layer.mlp.experts


def _ints(part: Any) -> Iterator[tuple[str, int]]:
    for f in dataclasses.fields(part):
        value = getattr(part, f.name)
        if isinstance(value, int) and not isinstance(value, bool):
            yield f.name, value
