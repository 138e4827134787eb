"""A ``config.json`` dict as the model code reads it, in pure Python (no torch): the `Config`
view, the RoPE dict as transformers reads it and the activation names the families run, so the
config schemas (`families.schemas`) check a config without importing torch (the sim does)."""

from __future__ import annotations

from typing import Any

# `layers.ACTIVATIONS`' keys, in its order (layers checks they agree)
ACTIVATION_NAMES = ("silu", "swish", "gelu", "relu", "relu2")


class Config:
    """Attribute view over a Hugging Face ``config.json`` dict, with per-call defaults."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getattr__(self, name: str) -> Any:
        # Read through __dict__: copy and pickle look attributes up on an instance whose __init__
        # never ran, where `self._data` would call this method again, without end.
        data = self.__dict__.get("_data")
        if data is None or name not in data:
            raise AttributeError(f"config has no field {name!r}")
        return data[name]

    def get(self, name: str, default: Any = None) -> Any:
        value = self._data.get(name, default)
        return default if value is None else value

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)


def rope_parameters(config: Config, default_theta: float = 10000.0) -> dict[str, Any]:
    """The RoPE dict as transformers 5.24 reads it, whichever way the config spells it.

    Newer configs carry ``rope_parameters`` (with ``rope_theta`` inside); older ones a top-level
    ``rope_theta`` and an optional ``rope_scaling`` dict (whose ``type`` key is the old name of
    ``rope_type``). Where a config has both dicts, ``rope_scaling`` is taken whole, as transformers
    takes it (`RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`); missing ``rope_theta`` and
    ``partial_rotary_factor`` come from the top level, then ``default_theta`` (the family's); a
    top-level ``original_max_position_embeddings`` replaces the dict's (llama3, yarn, longrope).
    """
    params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
    params.setdefault("rope_theta", config.get("rope_theta", default_theta))
    params.setdefault("rope_type", params.get("type", "default"))
    if config.get("partial_rotary_factor") is not None:
        params.setdefault("partial_rotary_factor", config.partial_rotary_factor)
    # transformers sets these types' original context from a top-level key of that name, over
    # the dict's own (`standardize_rope_params`)
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        original = config.get("original_max_position_embeddings")
        if original is not None:
            params["original_max_position_embeddings"] = original
    return params
