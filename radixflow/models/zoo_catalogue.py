"""The zoo's names and what each is built from: ``<family>-tiny`` / ``<family>-small`` presets and
the real ``smollm2-135m`` (`ZOO`), and the config.json dict each builds from (`preset_config`).

Family modules are imported lazily, by name, so a broken or missing family affects only its own
entries. A family's preset configs live apart from its model code, in the module of the same name
under `radixflow.models.presets` (plain data, no torch), so a preset can be read, e.g. for the
sim's shape of a zoo name, without importing torch.
"""

from __future__ import annotations

import copy
import functools
import importlib
from dataclasses import dataclass
from typing import Any

from radixflow.models.registry import UnknownModelError

SIZES = ("tiny", "small")
PRESETS_PACKAGE = "radixflow.models.presets"

# family -> (module, presets dict attribute, name of its recurrent layer kind or None); the presets
# dict is read from the module of the same name under radixflow.models.presets
FAMILY_SOURCES: dict[str, tuple[str, str, str | None]] = {
    "llama": ("radixflow.models.families.llama", "PRESETS_LLAMA", None),
    "qwen3": ("radixflow.models.families.llama", "PRESETS_QWEN3", None),
    "qwen3_5": ("radixflow.models.families.qwen3_5", "PRESETS", "deltanet"),
    "qwen3_next": ("radixflow.models.families.qwen3_next", "PRESETS", "deltanet"),
    "lfm2": ("radixflow.models.families.lfm2", "PRESETS", "conv"),
    "nemotron_h": ("radixflow.models.families.nemotron_h", "PRESETS", "mamba2"),
    "falcon_h1": ("radixflow.models.families.falcon_h1", "PRESETS", "mamba2"),
}


class ModelUnavailableError(RuntimeError):
    """A known zoo name whose family module (or weights package) cannot be loaded here."""


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str
    size: str  # preset key ("tiny"/"small"), or "gguf" for real weights


ZOO: dict[str, ZooEntry] = {
    **{
        f"{family}-{size}": ZooEntry(f"{family}-{size}", family, size)
        for family in FAMILY_SOURCES
        for size in SIZES
    },
    "smollm2-135m": ZooEntry("smollm2-135m", "llama", "gguf"),
}


def model_names() -> list[str]:
    return list(ZOO)


def zoo_entry(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        valid = ", ".join(ZOO)
        raise UnknownModelError(
            f"unknown model {name!r}: not a zoo name and not a directory with config.json "
            f"(zoo names: {valid})"
        ) from None


def family_module(family: str) -> Any:
    """The family's model code (imports torch)."""
    return _import(family, FAMILY_SOURCES[family][0])


def presets_module(family: str) -> Any:
    """The family's preset configs: plain data, no torch."""
    return _import(family, PRESETS_PACKAGE + "." + FAMILY_SOURCES[family][0].rsplit(".", 1)[-1])


def _import(family: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except Exception as e:  # missing or broken module: only this family is unavailable
        raise ModelUnavailableError(
            f"model family {family!r} is unavailable: importing {module_name} failed ({e!r})"
        ) from e


@functools.lru_cache(maxsize=1)
def _smollm2_config() -> dict[str, Any]:
    try:
        from radixflow.models.io import gguf  # its reader needs the torch extra; the presets do not
    except ImportError as e:
        raise ModelUnavailableError(
            f"smollm2-135m is read from its GGUF file, which needs the torch extra ({e.name!r} is "
            "missing): pip install -e '.[torch]'"
        ) from e
    try:
        return gguf.gguf_config(gguf.open_gguf(gguf.smollm2_path()))
    except (FileNotFoundError, gguf.GGUFError) as e:  # a cut or garbled file: this entry only
        raise ModelUnavailableError(f"smollm2-135m is unavailable: {e}") from e


def preset_config(name: str) -> dict[str, Any]:
    """The config.json dict the zoo builds ``name`` from (a copy)."""
    entry = zoo_entry(name)
    if entry.size == "gguf":
        return copy.deepcopy(_smollm2_config())  # the cached one holds rope_parameters, a dict
    module = presets_module(entry.family)
    presets = getattr(module, FAMILY_SOURCES[entry.family][1], None)
    if not isinstance(presets, dict) or entry.size not in presets:
        raise ModelUnavailableError(
            f"{module.__name__} has no preset {FAMILY_SOURCES[entry.family][1]}[{entry.size!r}]"
        )
    return copy.deepcopy(presets[entry.size])
