"""The torch loader's check of a ``config.json`` (`io.loader.read_config`: its family's schema),
looked up by ``model_type`` without importing a family's model code (nor torch), so the sim
(`options.sim_shape`) refuses, in the same words, a checkpoint the torch runner would refuse."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from radixflow.models.config_schema import Schema, validate_config
from radixflow.models.config_types import show
from radixflow.models.families import schemas
from radixflow.problems import Problem

# model_type -> (schema, defaults): each family class's ``config_schema`` and ``config_defaults``
# (a test ties them to `registry.FAMILIES`)
SCHEMAS: dict[str, tuple[Schema, dict[str, Any]]] = {
    "llama": (schemas.FULL_ATTENTION, schemas.LLAMA_DEFAULTS),
    "qwen3": (schemas.QWEN3, schemas.QWEN3_DEFAULTS),
    "qwen3_5_text": (schemas.QWEN3_5, schemas.QWEN3_5_DEFAULTS),
    "qwen3_next": (schemas.QWEN3_NEXT, schemas.QWEN3_NEXT_DEFAULTS),
    "lfm2": (schemas.LFM2, schemas.LFM2_DEFAULTS),
    "nemotron_h": (schemas.NEMOTRON_H, schemas.NEMOTRON_H_DEFAULTS),
    "falcon_h1": (schemas.FALCON_H1, schemas.FALCON_H1_DEFAULTS),
}


def config_problem(config: Mapping[str, Any]) -> Problem | None:
    """The first problem the torch loader finds in the language model's config ``config`` (a
    multimodal one's ``text_config``, as the loader reads it). None where there is none, or where
    no torch family reads its ``model_type`` (the sim costs some the torch runner does not run)."""
    entry = SCHEMAS.get(str(config.get("model_type")))
    if entry is None:
        return None
    problems = validate_config(entry[0], dict(config), entry[1])
    return problems[0] if problems else None


def quantized_problem(quantization: object) -> Problem:
    """Why a quantized checkpoint is refused up front: its weights mean nothing without the scales
    and packing no family reads (each would be refused alone as a tensor no parameter takes)."""
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    which = f" (quant_method {show(method)})" if method is not None else ""
    return Problem(
        "quantization_config", f"quantized checkpoints are not supported{which}; use unquantized weights"
    )
