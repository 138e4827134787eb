"""Hugging Face ``config.json`` dicts → `ModelShape`, one small reader per ``model_type``
(`config_readers.READERS`, the layers); here the config as they read it (a multimodal wrapper's
language model, transformers' defaults, nulls as absent keys) and what is not a layer.

The same readers serve the zoo checkpoints (calibration times them on the torch runner) and the
public configs the GPU-scale sim shapes are written as, so both are costed by one set of rules.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from radixflow.costmodel.shape.config_readers import READERS
from radixflow.costmodel.shape.config_values import Config, first_set, integer
from radixflow.costmodel.shape.model_shape import DEFAULT_CONTEXT, Layer, ModelShape
from radixflow.plugins import import_plugins
from radixflow.problems import shown


class UnknownModelTypeError(ValueError):
    """The config's ``model_type`` has no reader here."""


def _tied(cfg: Config) -> bool:
    return bool(first_set(cfg, ("tie_word_embeddings",), False))


def _lfm2_tied(cfg: Config) -> bool:
    """LFM2's own ``tie_embedding`` decides where given (transformers' Lfm2Config sets
    ``tie_word_embeddings`` from it), and it ties by default, as `models.families.lfm2` builds it."""
    return bool(first_set(cfg, ("tie_embedding", "tie_word_embeddings"), True))


def _never_tied(cfg: Config) -> bool:
    return False  # Nemotron-H: transformers keeps lm_head apart whatever tie_word_embeddings says


# model_type -> whether its output projection shares the embedding's weights (else `_tied`)
TIES: dict[str, Callable[[Config], bool]] = {"lfm2": _lfm2_tied, "nemotron_h": _never_tied}


# multimodal wrapper model_type -> the model_type of the language model it nests under text_config
WRAPPERS: dict[str, str] = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text"}


def language_config(cfg: Config) -> Config:
    """The config of the language model a checkpoint's ``config.json`` describes: a multimodal
    Qwen3.5 (or Qwen3.5-MoE) config nests it under ``text_config``, which is what the torch loader
    builds (`radixflow.models.io.loader.read_config`, the same rule); any other config as it is."""
    inner = WRAPPERS.get(str(cfg.get("model_type")))
    if inner is not None and isinstance(cfg.get("text_config"), dict):
        return {**cfg["text_config"], "model_type": inner}
    return cfg


# model_type -> what transformers' config class fills in for a key config.json leaves out, where
# that is not what the readers derive (every query head its own KV head of hidden / heads): the
# torch loader adds the same (`models.families.schemas.QWEN3_DEFAULTS`, ...); a null stays null
DEFAULTS: dict[str, Config] = {
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128},
    "qwen3_5_text": {"num_key_value_heads": 4, "head_dim": 256},
    "qwen3_next": {
        "num_key_value_heads": 2,
        "head_dim": 256,
        # its MoE: no num_experts is 512 experts on every layer, never dense
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
    },
    "lfm2": {"num_key_value_heads": 8},
    "nemotron_h": {"num_key_value_heads": 8, "head_dim": 128},
    "falcon_h1": {"num_key_value_heads": 8, "mamba_d_ssm": 1024},  # a null mamba_d_ssm: expand x hidden
}


def shape_from_config(name: str, cfg: Config, source: str = "") -> ModelShape:
    """The cost-model shape of a model given its Hugging Face config dict."""
    cfg = language_config(cfg)
    cfg = {**DEFAULTS.get(str(cfg.get("model_type")), {}), **cfg}  # for absent keys, not nulls
    # then a null is an absent key, as the families read it: a required one is a KeyError naming it
    cfg = {k: v for k, v in cfg.items() if v is not None}
    kind = cfg.get("model_type")
    if str(kind) in WRAPPERS:  # language_config found no language model inside
        raise ValueError(f"model_type {kind!r} nests its language model under text_config: none here")
    reader = READERS.get(str(kind))
    if reader is None:  # read as the package is imported, they import no plugin: one may hold it
        import_plugins()
        reader = READERS.get(str(kind))
    if reader is None:
        known = f"{', '.join(READERS)}; {', '.join(WRAPPERS)} with the language model under text_config"
        raise UnknownModelTypeError(f"no cost-model reader for model_type {kind!r} (known: {known})")
    return ModelShape(
        name=name,
        hidden=integer(cfg, "hidden_size"),
        vocab_size=integer(cfg, "vocab_size"),
        layers=_layers(str(kind), reader, cfg),
        tied_embeddings=TIES.get(str(kind), _tied)(cfg),
        max_context=integer(cfg, "max_position_embeddings", DEFAULT_CONTEXT),
        source=source,
    )


def _layers(kind: str, reader: Callable[[Config], tuple[Layer, ...]], cfg: Config) -> tuple[Layer, ...]:
    """What ``reader`` reads of ``cfg``, checked to be layers: a reader added from outside the
    package (docs/extending.md) answering anything else is a ValueError naming it, not a
    traceback from the shape or the costs."""
    got = reader(cfg)
    why = None if isinstance(got, tuple | list) else "not a tuple of Layers"
    stray = next((layer for layer in got if not isinstance(layer, Layer)), None) if why is None else None
    if stray is not None:
        why = f"{shown(stray)} is not a Layer"
    if why is not None:
        raise ValueError(f"the cost-model reader of model_type {kind!r} returned {shown(got)}: {why}")
    return tuple(got)


def shape_from_checkpoint(name: str, directory: str | Path) -> ModelShape:
    """The cost-model shape of the checkpoint in ``directory`` (its config.json), named ``name``."""
    config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    return shape_from_config(name, config, str(directory))
