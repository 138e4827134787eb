"""Model families by Hugging Face ``model_type``; imported lazily so one family's import cost
(or breakage) never touches the others."""

from __future__ import annotations

import importlib
from typing import Any

from radixflow.plugins import Registry

# model_type -> "module:class". Each family module also exposes PRESETS (see zoo.py).
FAMILIES: Registry[str] = Registry(
    "model family",
    {
        "llama": "radixflow.models.families.llama:LlamaForCausalLM",
        "qwen3": "radixflow.models.families.llama:Qwen3ForCausalLM",
        "qwen3_5_text": "radixflow.models.families.qwen3_5:Qwen35ForCausalLM",
        "qwen3_next": "radixflow.models.families.qwen3_next:Qwen3NextForCausalLM",
        "lfm2": "radixflow.models.families.lfm2:Lfm2ForCausalLM",
        "nemotron_h": "radixflow.models.families.nemotron_h:NemotronHForCausalLM",
        "falcon_h1": "radixflow.models.families.falcon_h1:FalconH1ForCausalLM",
    },
)


class UnknownModelError(ValueError):
    pass


def check_model_type(model_type: object) -> str:
    """``model_type`` if a family implements it, else `UnknownModelError` listing those that exist."""
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        known = ", ".join(sorted(FAMILIES))
        raise UnknownModelError(f"unsupported model_type {model_type!r} (supported: {known})")
    return model_type


def model_class(model_type: str) -> Any:
    """The class of ``model_type``'s family; an entry (a plugin's, docs/extending.md) that names
    none is an `UnknownModelError` saying why, not a traceback where a checkpoint is loaded."""
    entry = FAMILIES[check_model_type(model_type)]
    module, sep, name = entry.partition(":") if isinstance(entry, str) else ("", "", "")
    said = f"model family {model_type!r}: {entry!r}"
    if not (module and sep and name) or ":" in name:
        raise UnknownModelError(f"{said} is no 'module:Class'")
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not f"{module}.".startswith(f"{e.name}."):  # one it imports (torch): as is
            raise
        raise UnknownModelError(f"{said}: cannot import {module!r} ({e})") from None
    if not hasattr(found, name):
        raise UnknownModelError(f"{said}: module {module!r} has no {name!r}")
    return getattr(found, name)
