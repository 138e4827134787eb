"""What ``radixflow models`` lists of a zoo model: its size and layer structure (`model_info`,
`list_models`), read from the model built on the meta device, no weights."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from radixflow.models.zoo_catalogue import (
    FAMILY_SOURCES,
    ZOO,
    ModelUnavailableError,
    family_module,
    preset_config,
    zoo_entry,
)


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str
    model_type: str
    params: int
    hybrid: bool  # has recurrent layers (needs state checkpoints, not just KV)
    layer_kinds: str  # e.g. "attention:2 deltanet:2"
    layers: tuple[str, ...]  # kind of each layer, in order


def _model_on_meta(config: dict[str, Any]) -> Any:
    """The model without allocating weights (falls back to CPU for modules that need real data)."""
    import torch

    from radixflow.models.layers import Config
    from radixflow.models.registry import model_class

    cls = model_class(config["model_type"])
    try:
        with torch.device("meta"):
            return cls(Config(config))
    except Exception:
        return cls(Config(config))


def model_info(name: str) -> ModelInfo:
    """Size and layer structure of a zoo model (builds it on the meta device, no weights)."""
    entry = zoo_entry(name)
    config = preset_config(name)
    family_module(entry.family)  # a family whose model code cannot load is not listed (smollm2's too)
    model = _model_on_meta(config)
    recurrent_kind = FAMILY_SOURCES[entry.family][2] or "recurrent"
    kv, state = set(model.kv_layout()), set(model.state_layout())
    n_layers = max([int(config.get("num_hidden_layers", 0)), *(i + 1 for i in kv | state)])
    feed_forward = _feed_forward_kinds(config, n_layers)
    layers = tuple(_layer_kind(i in kv, i in state, recurrent_kind, feed_forward[i]) for i in range(n_layers))
    counts: dict[str, int] = {}
    for kind in layers:
        counts[kind] = counts.get(kind, 0) + 1
    return ModelInfo(
        name=name,
        family=entry.family,
        model_type=config["model_type"],
        params=sum(p.numel() for p in model.parameters()),
        hybrid=bool(state),
        layer_kinds=" ".join(f"{k}:{v}" for k, v in counts.items()),
        layers=layers,
    )


def _feed_forward_kinds(config: dict[str, Any], n_layers: int) -> list[str]:
    """What each layer is where it is neither attention nor recurrent, by the family's own reading
    of its pattern: "moe" for a routed MoE layer (Nemotron-H's "E"), else "mlp"."""
    from radixflow.models.registry import model_class

    read = model_class(config["model_type"]).config_schema.layer_kinds
    kinds = read(config) if read is not None else []
    return [kind if kind == "moe" else "mlp" for kind in kinds[:n_layers]] + ["mlp"] * (n_layers - len(kinds))


def _layer_kind(attention: bool, recurrent: bool, recurrent_kind: str, feed_forward: str) -> str:
    if attention and recurrent:
        return f"attention+{recurrent_kind}"  # parallel heads in one layer (Falcon-H1)
    if attention:
        return "attention"
    return recurrent_kind if recurrent else feed_forward


def list_models(include_unavailable: bool = False) -> list[ModelInfo]:
    """Info for every zoo model whose family can be loaded here.

    Unavailable entries are skipped, or raise `ModelUnavailableError` with
    ``include_unavailable=True`` (so a broken family is not silently hidden when asked for).
    """
    out = []
    for name in ZOO:
        try:
            out.append(model_info(name))
        except ModelUnavailableError:
            if include_unavailable:
                raise
    return out
