"""Optional dependencies: a command that needs an extra says which one, in one line."""

from __future__ import annotations

import importlib

from radixflow.cli.command import UsageError

# What `pip install -e '.[torch]'` brings (pyproject.toml, [project.optional-dependencies]).
TORCH_EXTRA = ("torch", "safetensors", "tokenizers", "numpy", "gguf", "jinja2")


def require_torch_extra(what: str) -> None:
    """Raise a `UsageError` naming the install command when a package of the extra is missing."""
    for name in TORCH_EXTRA:
        try:
            importlib.import_module(name)
        except ImportError:
            raise UsageError(
                f"{what} needs the torch extra (package {name!r} is missing): pip install -e '.[torch]'"
            ) from None
